package main

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// The output formats of `kuma-dp vips`: table (for people), json (for tools), zone (RFC 1035).

type vipsJSONEntry struct {
	Hostname            string            `json:"hostname"`
	IPv4                string            `json:"ipv4"`
	IPv6                string            `json:"ipv6"`
	Ports               []uint32          `json:"ports"`
	Origin              vipalloc.Origin   `json:"origin"`
	Key                 string            `json:"key"`
	Tags                mesh.Tags         `json:"tags"`
	Status              vipalloc.Status   `json:"status"`
	Reason              string            `json:"reason"`
	MeshExternalService string            `json:"meshExternalService,omitempty"`
	MeshService         string            `json:"meshService,omitempty"`
	Targets             []vipalloc.Target `json:"targets,omitempty"`
	Selector            mesh.Tags         `json:"selector,omitempty"`
}

type vipsJSONOut struct {
	Entries              []vipsJSONEntry               `json:"entries"`
	Skipped              []vipalloc.Skip               `json:"skipped"`
	MeshExternalServices map[string]vipalloc.MESStatus `json:"meshExternalServices"`
	// MeshServices is each MeshService's status, as Kuma shapes it (computed here).
	MeshServices map[string]vipalloc.MeshServiceStatus `json:"meshServices"`
}

func vipsAddrText(e *vipalloc.Entry) (v4, v6 string) {
	if e.IPv4().IsValid() {
		v4 = e.IPv4().String()
	}
	if e.IPv6().IsValid() {
		v6 = e.IPv6().String()
	}
	return v4, v6
}

func vipsWriteJSON(w io.Writer, t *vipalloc.Table) error {
	out := vipsJSONOut{Entries: []vipsJSONEntry{}, Skipped: t.Skipped(), MeshExternalServices: t.MeshExternalServiceStatuses()}
	if out.Skipped == nil {
		out.Skipped = []vipalloc.Skip{}
	}
	if out.MeshExternalServices == nil {
		out.MeshExternalServices = map[string]vipalloc.MESStatus{}
	}
	if out.MeshServices = t.MeshServiceStatuses(); out.MeshServices == nil {
		out.MeshServices = map[string]vipalloc.MeshServiceStatus{}
	}
	for _, e := range t.Entries() {
		v4, v6 := vipsAddrText(e)
		tags := e.Tags
		if tags == nil {
			tags = mesh.Tags{}
		}
		out.Entries = append(out.Entries, vipsJSONEntry{Hostname: e.Hostname, IPv4: v4, IPv6: v6, Ports: e.Ports(),
			Origin: e.Origin(), Key: e.Key(), Tags: tags, Status: e.Status, Reason: e.Reason(),
			MeshExternalService: e.MeshExternalService(), MeshService: e.MeshService(), Targets: e.Targets(), Selector: e.Selector()})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func vipsWriteTable(w io.Writer, t *vipalloc.Table) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOSTNAME\tIPV4\tIPV6\tPORTS\tORIGIN\tSTATUS\tTAGS / REASON")
	for _, e := range t.Entries() {
		v4, v6 := vipsAddrText(e)
		if v4 == "" {
			v4, v6 = "-", "-"
		}
		detail := e.Tags.String()
		if e.Status != vipalloc.Available {
			detail = e.Reason()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s/%s\t%s\t%s\n", e.Hostname, v4, v6, vipalloc.PortsText(e.Ports()),
			e.Origin().Kind, e.Origin().Name, e.Status, detail)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if sk := t.Skipped(); len(sk) > 0 {
		fmt.Fprintf(w, "\nSkipped (no hostname):\n")
		for _, s := range sk {
			fmt.Fprintf(w, "  %s/%s %s: %s\n", s.Origin.Kind, s.Origin.Name, s.Key, s.Reason)
		}
	}
	if ms := t.MeshServiceStatuses(); len(ms) > 0 {
		fmt.Fprintf(w, "\nMeshService statuses:\n")
		for _, name := range vipsSortedKeys(ms) {
			st := ms[name]
			vip := "-"
			if len(st.VIPs) > 0 {
				vip = st.VIPs[0].IP
			}
			fmt.Fprintf(w, "  %s: vip %s\n", name, vip)
			for _, a := range st.Addresses {
				fmt.Fprintf(w, "    %s %s via %s/%s", vipsOrDash(a.Hostname), a.Status, a.Origin, a.HostnameGeneratorRef.CoreName)
				if a.Reason != "" {
					fmt.Fprintf(w, ": %s", a.Reason)
				}
				fmt.Fprintln(w)
			}
		}
	}
	if mes := t.MeshExternalServiceStatuses(); len(mes) > 0 {
		fmt.Fprintf(w, "\nMeshExternalService statuses:\n")
		for _, name := range vipsSortedKeys(mes) {
			st := mes[name]
			fmt.Fprintf(w, "  %s: vip %s (%s)\n", name, vipsOrDash(st.VIP.Value), st.VIP.Type)
			for _, a := range st.Addresses {
				fmt.Fprintf(w, "    %s %s via %s/%s", vipsOrDash(a.Hostname), a.Status, a.Origin.Kind, a.Origin.Name)
				if a.Reason != "" {
					fmt.Fprintf(w, ": %s", a.Reason)
				}
				fmt.Fprintln(w)
			}
		}
	}
	return nil
}

// vipsWriteZone prints an RFC 1035 master file: $ORIGIN (the longest suffix every name shares),
// $TTL, an SOA whose serial is a hash of the records (same records, same serial), and the A
// and AAAA records of every available hostname. ttl is the resolver's (kuma-dp run --dns-ttl),
// for the records and as the negative TTL, so the file says what the resolver answers.
func vipsWriteZone(w io.Writer, t *vipalloc.Table, ttl uint32) error {
	avail := t.Available()
	names := make([]string, len(avail))
	for i, e := range avail {
		names[i] = e.Hostname
	}
	origin := vipsCommonSuffix(names)
	var recs strings.Builder
	for _, e := range avail {
		owner := vipsRelative(e.Hostname, origin)
		fmt.Fprintf(&recs, "%s\tIN\tA\t%s\n", owner, e.IPv4())
		if e.IPv6().IsValid() {
			fmt.Fprintf(&recs, "%s\tIN\tAAAA\t%s\n", owner, e.IPv6())
		}
	}
	h := fnv.New32a()
	h.Write([]byte(recs.String()))
	serial := h.Sum32()
	fmt.Fprintf(w, "; hostnames and VIPs served by the dataplane (kuma-dp vips -o zone)\n")
	fmt.Fprintf(w, "$ORIGIN %s\n$TTL %d\n", origin, ttl)
	fmt.Fprintf(w, "@\tIN\tSOA\tns.kuma-dp. hostmaster.kuma-dp. (\n\t\t%d ; serial (hash of the records)\n"+
		"\t\t3600 ; refresh\n\t\t600 ; retry\n\t\t86400 ; expire\n\t\t%d ) ; negative TTL\n", serial, ttl)
	_, err := io.WriteString(w, recs.String())
	return err
}

// vipsCommonSuffix is the longest sequence of whole labels that ends every name, as an absolute
// name ("." when there is none).
func vipsCommonSuffix(names []string) string {
	if len(names) == 0 {
		return "."
	}
	labels := strings.Split(names[0], ".")
	common := labels[1:] // never the whole first name: the origin is a parent
	for _, n := range names[1:] {
		ls := strings.Split(n, ".")
		k := 0
		for k < len(common) && k < len(ls)-1 && common[len(common)-1-k] == ls[len(ls)-1-k] {
			k++
		}
		common = common[len(common)-k:]
	}
	if len(common) == 0 {
		return "."
	}
	return strings.Join(common, ".") + "."
}

func vipsRelative(name, origin string) string {
	if origin == "." {
		return name + "."
	}
	return strings.TrimSuffix(name, "."+strings.TrimSuffix(origin, "."))
}

func vipsOrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func vipsSortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
