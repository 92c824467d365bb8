package vipalloc

import (
	"net/netip"
	"slices"
	"sort"

	"github.com/kumadp/kuma-dp/hostname"
	"github.com/kumadp/kuma-dp/mesh"
)

// mesSource is the MeshExternalService hostnames (the MeshExternalService design): every HostnameGenerator whose
// targetRef selects a MeshExternalService's labels renders one hostname for it. There are
// few of them, so they are recomputed on every allocation and diffed with the last ones.
type mesSource struct {
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

func newMESSource(twin *netip.Prefix) *mesSource {
	return &mesSource{cands: map[string]*candidate{}, byMES: map[string][]*candidate{}, gens: map[string]*compiledGen{},
		twin: twin}
}

// selects reports whether a generator's targetRef picks a MeshExternalService
// (mesh.TargetRef.SelectsMES).
func selects(ref mesh.TargetRef, labels map[string]string) bool {
	ok, _ := ref.SelectsMES(labels)
	return ok
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
	for _, es := range s.MeshExternalServices {
		if _, ignored := es.Labels[mesh.IgnoreLabel]; ignored {
			continue
		}
		names = append(names, es.Name)
		data := hostname.HGData{Name: es.Name, DisplayName: es.Name, Mesh: s.Mesh, Zone: es.Labels[mesh.ZoneTag],
			Namespace: es.Labels[mesh.NamespaceLabel], Labels: es.Labels}
		if data.Zone == "" {
			data.Zone = localZone // a resource of this zone carries no zone label (as in Kuma)
		}
		if dn := es.Labels[displayNameLabel]; dn != "" {
			data.DisplayName = dn
		}
		for _, g := range gens {
			if !selects(g.hg.Spec.TargetRef, es.Labels) {
				continue
			}
			created := g.hg.CreationTime
			if es.CreationTime.After(created) {
				created = es.CreationTime
			}
			src := &source{origin: Origin{Kind: mesh.KindHostnameGenerator, Name: g.hg.Name}, explicit: true,
				created: created}
			c := &candidate{refs: 1}
			c.key = g.hg.Name + "{meshexternalservice=" + es.Name + "}"
			d := entryDetail{twin: m.twin, src: src, origin: src.origin, meshExternalService: es.Name}
			if g.err != nil {
				d.reason = g.err.Error()
			} else if host, err := g.tpl.Render(data); err != nil {
				d.reason = err.Error()
			} else {
				c.Hostname = host
				c.setPorts(&d, []uint32{es.Spec.Match.Port})
			}
			c.setDetail(d)
			if old := m.cands[c.key]; old != nil && sameMESCandidate(old, c) {
				c = old
			}
			next[c.key] = c
			byMES[es.Name] = append(byMES[es.Name], c)
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
		sort.Slice(cs, func(i, j int) bool { return cs[i].key < cs[j].key })
	}
	added, removed = diffSorted(m.names, names)
	m.cands, m.byMES, m.names = next, byMES, names
	return added, removed
}

func (m *mesSource) has(name string) bool {
	_, ok := slices.BinarySearch(m.names, name)
	return ok
}

func sameMESCandidate(a, b *candidate) bool {
	// A published candidate's Reason is its status; compare reasons of skips only.
	return a.Hostname == b.Hostname && a.port() == b.port() && (a.Hostname != "" || a.Reason() == b.Reason()) &&
		a.MeshExternalService() == b.MeshExternalService() && a.source().created.Equal(b.source().created) && a.Origin() == b.Origin()
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
