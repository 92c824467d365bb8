package vipalloc

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/kumadp/kuma-dp/mesh"
)

// Status of an entry, as seed 002's status block spells it.
type Status string

const (
	Available    Status = "Available"
	NotAvailable Status = "NotAvailable"
)

// Origin is what produced a hostname: {kind, name} of a policy, or {"Service", svc} for the
// default `<service>.mesh` names.
type Origin struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// Origin kinds besides the mesh resource kinds.
const OriginService = "Service"

// Entry is one hostname of the table. Entries are shared between tables and never mutated.
type Entry struct {
	// Hostname is lower-case, without the final dot.
	Hostname string `json:"hostname"`
	// IPv4 and IPv6 are zero (invalid) when Status is NotAvailable.
	IPv4  netip.Addr `json:"ipv4"`
	IPv6  netip.Addr `json:"ipv6"`
	Ports []uint32   `json:"ports"`
	// Origin is the winning origin; Key is `<policy>{k1=v1,k2=v2}` (seed 001).
	Origin Origin `json:"origin"`
	Key    string `json:"key"`
	// Tags are the destination tags the hostname routes to (the tuple).
	Tags   mesh.Tags `json:"tags"`
	Status Status    `json:"status"`
	Reason string    `json:"reason,omitempty"`
	// MeshExternalService names the resource for MeshExternalService hostnames (VIPs from
	// the external pool); empty otherwise.
	MeshExternalService string `json:"meshExternalService,omitempty"`
}

// Outbound is what xds needs to build one listener: a VIP:port, the hostname it serves
// and the destination (service tags, or a MeshExternalService by name).
type Outbound struct {
	IPv4     netip.Addr
	IPv6     netip.Addr
	Port     uint32
	Hostname string
	Tags     mesh.Tags
	Origin   Origin
	// MeshExternalService is the resource name when Origin points at one (or at a
	// HostnameGenerator that named one); empty otherwise.
	MeshExternalService string
}

// MESStatus is seed 002's status block of one MeshExternalService.
type MESStatus struct {
	VIP       MESVIP       `json:"vip"`
	Addresses []MESAddress `json:"addresses"`
}

// MESVIP is status.vip.
type MESVIP struct {
	Value string `json:"value"`
	Type  string `json:"type"` // "Kuma"
}

// MESAddress is one status.addresses element.
type MESAddress struct {
	Hostname string `json:"hostname"`
	Status   Status `json:"status"`
	Origin   Origin `json:"origin"`
	Reason   string `json:"reason,omitempty"`
}

// Table is the result of one allocation: immutable, safe for concurrent readers.
type Table struct {
	byName map[string]*Entry     // available entries, by lower-case hostname
	byAddr map[netip.Addr]*Entry // IPv4 and IPv6 VIPs
	// all holds every entry, NotAvailable ones included, sorted by hostname then key.
	all       []*Entry
	outbounds []Outbound
	mes       map[string]MESStatus
	hash      string
}

// Lookup returns the available entry for a hostname. name may carry a final dot and any case.
func (t *Table) Lookup(name string) (*Entry, bool) {
	if t == nil {
		return nil, false
	}
	name = strings.TrimSuffix(name, ".")
	if e, ok := t.byName[name]; ok {
		return e, true
	}
	e, ok := t.byName[strings.ToLower(name)]
	return e, ok
}

// LookupAddr returns the entry owning a VIP (IPv4 or its IPv6 twin), for PTR.
func (t *Table) LookupAddr(ip netip.Addr) (*Entry, bool) {
	if t == nil {
		return nil, false
	}
	e, ok := t.byAddr[ip.Unmap()]
	return e, ok
}

// Entries returns every entry, NotAvailable ones included, sorted by hostname. Do not modify.
func (t *Table) Entries() []*Entry {
	if t == nil {
		return nil
	}
	return t.all
}

// Available returns the available entries, sorted by hostname.
func (t *Table) Available() []*Entry {
	var out []*Entry
	for _, e := range t.Entries() {
		if e.Status == Available {
			out = append(out, e)
		}
	}
	return out
}

// Len is the number of available hostnames.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return len(t.byName)
}

// Outbounds returns one element per available hostname and port, sorted by VIP then port.
func (t *Table) Outbounds() []Outbound {
	if t == nil {
		return nil
	}
	return t.outbounds
}

// MeshExternalServiceStatus returns seed 002's status block for one MeshExternalService.
func (t *Table) MeshExternalServiceStatus(name string) (MESStatus, bool) {
	if t == nil {
		return MESStatus{}, false
	}
	s, ok := t.mes[name]
	return s, ok
}

// Hash is a content hash of the table: equal hashes mean equal answers.
func (t *Table) Hash() string {
	if t == nil {
		return ""
	}
	return t.hash
}

// NewTable builds a Table from finished entries and MES statuses. It indexes available entries
// and derives the outbound list. Used by the allocator; exported so other stages' tests can
// build small tables by hand.
func NewTable(entries []*Entry, mes map[string]MESStatus) *Table {
	t := &Table{
		byName: make(map[string]*Entry, len(entries)),
		byAddr: make(map[netip.Addr]*Entry, 2*len(entries)),
		all:    append([]*Entry(nil), entries...),
		mes:    mes,
	}
	sort.SliceStable(t.all, func(i, j int) bool {
		if t.all[i].Hostname != t.all[j].Hostname {
			return t.all[i].Hostname < t.all[j].Hostname
		}
		return t.all[i].Key < t.all[j].Key
	})
	for _, e := range t.all {
		if e.Status != Available {
			continue
		}
		t.byName[e.Hostname] = e
		if e.IPv4.IsValid() {
			t.byAddr[e.IPv4] = e
		}
		if e.IPv6.IsValid() {
			t.byAddr[e.IPv6] = e
		}
		for _, p := range e.Ports {
			ob := Outbound{IPv4: e.IPv4, IPv6: e.IPv6, Port: p, Hostname: e.Hostname, Tags: e.Tags,
				Origin: e.Origin, MeshExternalService: e.MeshExternalService}
			t.outbounds = append(t.outbounds, ob)
		}
	}
	sort.Slice(t.outbounds, func(i, j int) bool {
		a, b := t.outbounds[i], t.outbounds[j]
		if c := a.IPv4.Compare(b.IPv4); c != 0 {
			return c < 0
		}
		return a.Port < b.Port
	})
	t.hash = hashEntries(t.all)
	return t
}

func hashEntries(all []*Entry) string {
	h := sha256.New()
	for _, e := range all {
		fmt.Fprintf(h, "%s|%s|%s|%v|%s|%s|%s|%s|%s|", e.Hostname, e.IPv4, e.IPv6, e.Ports,
			e.Origin.Kind, e.Origin.Name, e.Key, e.Status, e.MeshExternalService)
		keys := make([]string, 0, len(e.Tags))
		for k := range e.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(h, "%s=%s,", k, e.Tags[k])
		}
		h.Write([]byte{'\n'})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}
