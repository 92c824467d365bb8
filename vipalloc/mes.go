package vipalloc

import (
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/kumadp/kuma-dp/hostname"
	"github.com/kumadp/kuma-dp/mesh"
)

// mesSource is the hostnames of one kind of resource named by HostnameGenerators: the
// MeshExternalServices (the MeshExternalService design) or Kuma's MeshServices. Every
// HostnameGenerator whose targetRef selects a resource's labels renders one hostname for it
// (on each of its ports); the resource's hostnames share its one VIP. There are few of
// them, so they are recomputed on every allocation and diffed with the last ones.
type mesSource struct {
	kind  string                  // mesh.KindMeshExternalService or mesh.KindMeshService
	key   string                  // the VIP keys' prefix (mesKeyPrefix, msKeyPrefix)
	cands map[string]*candidate   // by key
	byMES map[string][]*candidate // per MeshExternalService, sorted by key
	names []string                // MeshExternalServices in the model (not ignored), sorted
	gens  map[string]*compiledGen
	twin  *netip.Prefix // the allocator's twin prefix, in its candidates' details
}

type compiledGen struct {
	hg  *mesh.HostnameGenerator
	tpl *hostname.HGTemplate
	err error
}

const displayNameLabel = "kuma.io/display-name"

func newMESSource(kind string, twin *netip.Prefix) *mesSource {
	key := mesKeyPrefix
	if kind == mesh.KindMeshService {
		key = msKeyPrefix
	}
	return &mesSource{kind: kind, key: key, cands: map[string]*candidate{}, byMES: map[string][]*candidate{}, gens: map[string]*compiledGen{},
		twin: twin}
}

// named is one resource a HostnameGenerator may name: its name, labels, creation time and
// ports.
type named struct {
	name    string
	labels  map[string]string
	created time.Time
	ports   []uint32
}

// namedOf lists the snapshot's resources of the source's kind.
func (m *mesSource) namedOf(s *mesh.Snapshot) []named {
	var out []named
	if m.kind == mesh.KindMeshService {
		for _, ms := range s.MeshServices {
			ports := make([]uint32, len(ms.Spec.Ports))
			for i, p := range ms.Spec.Ports {
				ports[i] = p.Port
			}
			out = append(out, named{ms.Name, ms.Labels(), ms.CreationTime(), ports})
		}
		return out
	}
	for _, es := range s.MeshExternalServices {
		out = append(out, named{es.Name, es.Labels(), es.CreationTime(), []uint32{es.Spec.Match.Port}})
	}
	return out
}

// selects reports whether a generator's targetRef picks a resource of kind: that kind (an
// empty one is MeshExternalService) and every targetRef tag among its labels. Empty tags
// select every resource of the kind (like an empty label selector).
func selects(kind string, ref mesh.TargetRef, labels map[string]string) bool {
	if rk := ref.Kind; rk != kind && (rk != "" || kind != mesh.KindMeshExternalService) {
		return false
	}
	for _, tg := range ref.Tags {
		got, ok := labels[tg.Key]
		if !ok || tg.Value != mesh.Wildcard && tg.Value != got {
			return false
		}
	}
	return true
}

// update recomputes the candidates of snapshot s and reports the differences to r.
// It returns the MeshExternalServices that appeared and went away.
func (m *mesSource) update(r *round, s *mesh.Snapshot) (added, removed []string) {
	gens := make([]*compiledGen, 0, len(s.HostnameGenerators))
	seenGen := map[string]bool{}
	for _, hg := range s.HostnameGenerators {
		g := m.gens[hg.Name]
		if g == nil || g.hg != hg && g.hg.Spec.Template != hg.Spec.Template {
			g = &compiledGen{}
			g.tpl, g.err = hostname.CompileHostnameGenerator(hg.Spec.Template)
			m.gens[hg.Name] = g
		}
		g.hg = hg
		seenGen[hg.Name] = true
		gens = append(gens, g)
	}
	for n := range m.gens {
		if !seenGen[n] {
			delete(m.gens, n)
		}
	}

	next := map[string]*candidate{}
	byMES := map[string][]*candidate{}
	localZone := s.LocalZone()
	var names []string
	for _, es := range m.namedOf(s) {
		if _, ignored := es.labels[mesh.IgnoreLabel]; ignored {
			continue
		}
		names = append(names, es.name)
		data := hostname.HGData{Name: es.name, DisplayName: es.name, Mesh: s.Mesh, Zone: es.labels[mesh.ZoneTag],
			Namespace: es.labels[mesh.NamespaceLabel], Labels: es.labels}
		if data.Zone == "" {
			data.Zone = localZone // a resource of this zone carries no zone label (as in Kuma)
		}
		if dn := es.labels[displayNameLabel]; dn != "" {
			data.DisplayName = dn
		}
		for _, g := range gens {
			if !selects(m.kind, g.hg.Spec.TargetRef, es.labels) {
				continue
			}
			created := g.hg.CreationTime()
			if es.created.After(created) {
				created = es.created
			}
			src := &source{origin: Origin{Kind: mesh.KindHostnameGenerator, Name: g.hg.Name}, explicit: true,
				created: created}
			for _, port := range es.ports {
				c := m.candidate(g, es, data, src, port)
				if old := m.cands[c.storedKey()]; old != nil && sameMESCandidate(old, c) {
					c = old
				}
				next[c.storedKey()] = c
				byMES[es.name] = append(byMES[es.name], c)
			}
		}
	}
	for k, old := range m.cands {
		if next[k] != old {
			r.remove(old)
		}
	}
	for k, c := range next {
		if m.cands[k] != c {
			r.add(c)
		}
	}
	sort.Strings(names)
	for _, cs := range byMES {
		sort.Slice(cs, func(i, j int) bool { return cs[i].storedKey() < cs[j].storedKey() })
	}
	added, removed = diffSorted(m.names, names)
	m.cands, m.byMES, m.names = next, byMES, names
	return added, removed
}

// candidate is the hostname generator g renders for resource es on port.
func (m *mesSource) candidate(g *compiledGen, es named, data hostname.HGData, src *source, port uint32) *candidate {
	c := &candidate{refs: 1}
	d := entryDetail{twin: m.twin, src: src, origin: src.origin}
	if m.kind == mesh.KindMeshService {
		d.key = g.hg.Name + "{meshservice=" + es.name + ",port=" + strconv.FormatUint(uint64(port), 10) + "}"
		d.meshService = es.name
	} else {
		d.key = g.hg.Name + "{meshexternalservice=" + es.name + "}"
		d.meshExternalService = es.name
	}
	if g.err != nil {
		d.reason = g.err.Error()
	} else if host, err := g.tpl.Render(data); err != nil {
		d.reason = err.Error()
	} else {
		c.setHostname(host)
		c.setPorts(&d, []uint32{port})
	}
	c.setDetail(d)
	return c
}

func (m *mesSource) has(name string) bool {
	_, ok := slices.BinarySearch(m.names, name)
	return ok
}

func sameMESCandidate(a, b *candidate) bool {
	// A published candidate's Reason is its status; compare reasons of skips only.
	return a.host().equal(b.host()) && a.port() == b.port() && (a.hasHost() || a.Reason() == b.Reason()) &&
		a.MeshExternalService() == b.MeshExternalService() && a.MeshService() == b.MeshService() && a.source().created.Equal(b.source().created) && a.Origin() == b.Origin()
}

// diffSorted returns what is in b but not a, and in a but not b (both sorted).
func diffSorted(a, b []string) (added, removed []string) {
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || i < len(a) && a[i] < b[j]:
			removed = append(removed, a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			added = append(added, b[j])
			j++
		default:
			i++
			j++
		}
	}
	return added, removed
}
