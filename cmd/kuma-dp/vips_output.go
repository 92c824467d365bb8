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
		tags := e.Tags()
		if tags == nil {
			tags = mesh.Tags{}
		}
		out.Entries = append(out.Entries, vipsJSONEntry{Hostname: e.Hostname(), IPv4: v4, IPv6: v6, Ports: e.Ports(),
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
		detail := e.Tags().String()
		if e.Status != vipalloc.Available {
			detail = e.Reason()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s/%s\t%s\t%s\n", e.Hostname(), v4, v6, vipalloc.PortsText(e.Ports()),
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
// $TTL, an SOA whose serial is a hash of the records (same records, same serial), an NS (this
// agent's resolver, on loopback: glue when its name falls inside the zone), and the A and AAAA
// records of every available hostname. ttl is the resolver's (kuma-dp run --dns-ttl), for the
// records and as the negative TTL, so the file says what the resolver answers. A name that is
// not a hostname (Kuma's `backend_ns_svc_80` service names: `_` is no hostname character,
// RFC 952) is answered by the resolver but written as a comment, so that the file passes
// named-checkzone's check-names and nsd-checkzone as written.
func vipsWriteZone(w io.Writer, t *vipalloc.Table, ttl uint32) error {
	avail := t.Available()
	names := make([]string, len(avail))
	for i, e := range avail {
		names[i] = e.Hostname()
	}
	origin := vipsCommonSuffix(names)
	var recs strings.Builder
	skipped := 0
	for i, e := range avail {
		owner := vipsRelative(names[i], origin)
		comment := ""
		if !vipsIsHostname(names[i]) {
			comment = "; "
			skipped++
		}
		fmt.Fprintf(&recs, "%s%s\tIN\tA\t%s\n", comment, owner, e.IPv4())
		if e.IPv6().IsValid() {
			fmt.Fprintf(&recs, "%s%s\tIN\tAAAA\t%s\n", comment, owner, e.IPv6())
		}
	}
	h := fnv.New32a()
	h.Write([]byte(recs.String()))
	serial := h.Sum32()
	fmt.Fprintf(w, "; hostnames and VIPs served by the dataplane (kuma-dp vips -o zone)\n")
	if skipped > 0 {
		fmt.Fprintf(w, "; %d name(s) commented out below are answered by the resolver but are not hostnames\n"+
			"; (RFC 952: letters, digits and '-'), which check-names would refuse\n", skipped)
	}
	fmt.Fprintf(w, "$ORIGIN %s\n$TTL %d\n", origin, ttl)
	fmt.Fprintf(w, "@\tIN\tSOA\t%s %s (\n\t\t%d ; serial (hash of the records)\n"+
		"\t\t3600 ; refresh\n\t\t600 ; retry\n\t\t86400 ; expire\n\t\t%d ) ; negative TTL\n", vipsNS, vipsHostmaster, serial, ttl)
	fmt.Fprintf(w, "@\tIN\tNS\t%s\n", vipsNS)
	if origin == "." || strings.HasSuffix(vipsNS, "."+origin) {
		fmt.Fprintf(w, "%s\tIN\tA\t127.0.0.1 ; the agent's resolver listens on loopback\n", vipsNS)
	}
	_, err := io.WriteString(w, recs.String())
	return err
}

// The zone's nameserver and SOA mailbox: this agent.
const (
	vipsNS         = "ns.kuma-dp."
	vipsHostmaster = "hostmaster.kuma-dp."
)

// vipsIsHostname reports whether every label of name is letters, digits and '-' (not first
// or last): the hostnames check-names accepts as the owner of an A or AAAA record.
func vipsIsHostname(name string) bool {
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if l == "" || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
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

// vipsExplainSelection explains a MeshExternalService or a HostnameGenerator named name:
// each generator against each service, the hostname it gives or why it selects nothing (a
// MeshExternalService with a VIP and no hostname otherwise says nothing). It reports false
// when name is neither.
func vipsExplainSelection(w io.Writer, s *mesh.Snapshot, t *vipalloc.Table, name string) bool {
	var mess []*mesh.MeshExternalService
	var hgs []*mesh.HostnameGenerator
	for _, es := range s.MeshExternalServices {
		if es.Name == name {
			mess = append(mess, es)
		}
	}
	for _, hg := range s.HostnameGenerators {
		if hg.Name == name {
			hgs = append(hgs, hg)
		}
	}
	oneGenerator := false
	switch {
	case len(mess) > 0:
		hgs = s.HostnameGenerators
	case len(hgs) > 0:
		oneGenerator = true
		mess = s.MeshExternalServices
	default:
		return false
	}
	selected := 0
	for _, es := range mess {
		st, _ := t.MeshExternalServiceStatus(es.Name)
		fmt.Fprintf(w, "MeshExternalService %s: VIP %s, labels %s\n", es.Name, vipsOrDash(st.VIP.Value), vipsLabels(es.Labels()))
		if _, ignored := es.Labels()[mesh.IgnoreLabel]; ignored {
			fmt.Fprintf(w, "  ignored (label %s): no VIP, no hostname\n", mesh.IgnoreLabel)
			continue
		}
		named := 0
		for _, hg := range hgs {
			ok, why := hg.Spec.TargetRef.SelectsMES(es.Labels())
			if !ok {
				fmt.Fprintf(w, "  HostnameGenerator %s: selects nothing here: %s\n", hg.Name, why)
				continue
			}
			selected++
			for _, a := range st.Addresses {
				if a.Origin.Name == hg.Name {
					named++
					fmt.Fprintf(w, "  HostnameGenerator %s: %s %s", hg.Name, vipsOrDash(a.Hostname), a.Status)
					if a.Reason != "" {
						fmt.Fprintf(w, ": %s", a.Reason)
					}
					fmt.Fprintln(w)
				}
			}
		}
		if len(hgs) == 0 {
			fmt.Fprintln(w, "  no HostnameGenerator in the mesh: no hostname")
		} else if named == 0 && !oneGenerator {
			fmt.Fprintln(w, "  no generator selects it: it has a VIP but no hostname")
		}
	}
	if oneGenerator && selected == 0 {
		fmt.Fprintf(w, "HostnameGenerator %s selects none of the %d MeshExternalServices: no hostname from it\n", hgs[0].Name, len(mess))
	}
	return true
}

// vipsLabels is labels as k=v, sorted, in braces.
func vipsLabels(labels map[string]string) string {
	parts := make([]string, 0, len(labels))
	for _, k := range vipsSortedKeys(labels) {
		parts = append(parts, k+"="+labels[k])
	}
	return "{" + strings.Join(parts, ",") + "}"
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
