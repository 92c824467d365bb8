package vipalloc

// MeshServiceStatus is a MeshService's status as Kuma shapes it, computed on the dataplane:
// its hostnames (each HostnameGenerator's, with whether it is served here and why not) and
// its VIP, from the MeshService pool (241.0.0.0/8 by default).
type MeshServiceStatus struct {
	Addresses []MeshServiceAddress `json:"addresses"`
	VIPs      []MeshServiceVIP     `json:"vips"`
}

// MeshServiceAddress is one status.addresses element: Kuma's hostname, origin and
// hostnameGeneratorRef, with the entry's status (and reason) here.
type MeshServiceAddress struct {
	Hostname             string                `json:"hostname"`
	Origin               string                `json:"origin"`
	HostnameGeneratorRef *HostnameGeneratorRef `json:"hostnameGeneratorRef,omitempty"`
	Status               Status                `json:"status"`
	Reason               string                `json:"reason,omitempty"`
}

// HostnameGeneratorRef names the generator of an address.
type HostnameGeneratorRef struct {
	CoreName string `json:"coreName"`
}

// MeshServiceVIP is one status.vips element.
type MeshServiceVIP struct {
	IP string `json:"ip"`
}

// meshServiceStatuses builds every MeshService's status (nil when there is none).
func (a *Allocator) meshServiceStatuses() map[string]MeshServiceStatus {
	if len(a.ms.names) == 0 {
		return nil
	}
	out := make(map[string]MeshServiceStatus, len(a.ms.names))
	for _, n := range a.ms.names {
		st := MeshServiceStatus{Addresses: []MeshServiceAddress{}, VIPs: []MeshServiceVIP{}}
		if v, ok := a.mesVIPs[msKeyPrefix+n]; ok {
			st.VIPs = append(st.VIPs, MeshServiceVIP{IP: u4(v).String()})
		}
		seen := map[string]bool{} // a hostname is listed once for all the service's ports
		for _, c := range a.ms.byMES[n] {
			if seen[c.Origin().Name+"/"+c.Hostname()] {
				continue
			}
			seen[c.Origin().Name+"/"+c.Hostname()] = true
			ad := MeshServiceAddress{Hostname: c.Hostname(), Origin: c.Origin().Kind, Status: NotAvailable, Reason: c.Reason(),
				HostnameGeneratorRef: &HostnameGeneratorRef{CoreName: c.Origin().Name}}
			if c.hasHost() {
				ad.Status, ad.Reason = a.candidateStatus(c)
			}
			st.Addresses = append(st.Addresses, ad)
		}
		out[n] = st
	}
	return out
}

// MeshServiceStatus returns the status of one MeshService.
func (t *Table) MeshServiceStatus(name string) (MeshServiceStatus, bool) {
	if t == nil {
		return MeshServiceStatus{}, false
	}
	s, ok := t.ms[name]
	return s, ok
}

// MeshServiceStatuses returns every MeshService's status, by name. Do not modify.
func (t *Table) MeshServiceStatuses() map[string]MeshServiceStatus {
	if t == nil {
		return nil
	}
	return t.ms
}
