package vipalloc

import (
	"fmt"
	"net/netip"
	"sort"
	"testing"
	"time"
	"unsafe"

	"github.com/kumadp/kuma-dp/mesh"
)

// Hand-made model pieces for tests (the same shapes mesh's decoder produces).

func dp(name string, tags ...mesh.Tags) *mesh.Dataplane {
	d := &mesh.Dataplane{Meta: mesh.Meta{Mesh: "default", Name: name}}
	d.Networking.Address = "10.0.0.1"
	for i, t := range tags {
		d.Networking.Inbound = append(d.Networking.Inbound, mesh.Inbound{Port: uint32(10000 + i), Tags: t})
	}
	return d
}

func svc(service, version, zone string) mesh.Tags {
	t := mesh.TagsOf(map[string]string{mesh.ServiceTag: service})
	if version != "" {
		t = t.With("version", version)
	}
	if zone != "" {
		t = t.With(mesh.ZoneTag, zone)
	}
	return t
}

func vo(name, host, port string, tags map[string]string, sels ...mesh.Tags) *mesh.VirtualOutbound {
	v := &mesh.VirtualOutbound{Meta: mesh.Meta{Mesh: "default", Name: name}}
	for _, s := range sels {
		v.Selectors = append(v.Selectors, mesh.Selector{Match: s})
	}
	v.Conf = mesh.VirtualOutboundConf{Host: host, Port: port, Tags: tags}
	return v
}

// designVOs is the four VirtualOutbounds of the VirtualOutbound design.
func designVOs() []*mesh.VirtualOutbound {
	return []*mesh.VirtualOutbound{
		vo("my-service", "httpbin.mesh", "8080", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "my-service"})),
		vo("my-service-by-version", "{{version}}.{{service}}.mesh", "8080",
			map[string]string{mesh.ServiceTag: "service", "version": "version"},
			mesh.TagsOf(map[string]string{mesh.ServiceTag: "*", "version": "*"})),
		vo("default", "{{service}}.mesh", "80", map[string]string{mesh.ServiceTag: "service"},
			mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"})),
		vo("service-by-zone", "{{service}}.{{zone}}.mesh", "80",
			map[string]string{mesh.ServiceTag: "service", mesh.ZoneTag: "zone"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"})),
	}
}

// snap builds a Snapshot directly (sorted like mesh.NewSnapshot does; no hash needed here).
func snap(dps []*mesh.Dataplane, vos []*mesh.VirtualOutbound, extra ...mesh.Resource) *mesh.Snapshot {
	s := &mesh.Snapshot{Mesh: "default", Self: dps[0], Dataplanes: append([]*mesh.Dataplane(nil), dps...),
		VirtualOutbounds: append([]*mesh.VirtualOutbound(nil), vos...)}
	for _, r := range extra {
		switch v := r.(type) {
		case *mesh.MeshExternalService:
			s.MeshExternalServices = append(s.MeshExternalServices, v)
		case *mesh.HostnameGenerator:
			s.HostnameGenerators = append(s.HostnameGenerators, v)
		case *mesh.MeshService:
			s.MeshServices = append(s.MeshServices, v)
		}
	}
	sort.Slice(s.Dataplanes, func(i, j int) bool { return s.Dataplanes[i].Name < s.Dataplanes[j].Name })
	sort.Slice(s.VirtualOutbounds, func(i, j int) bool { return s.VirtualOutbounds[i].Name < s.VirtualOutbounds[j].Name })
	return s
}

func mes(name string, port uint32, labels map[string]string) *mesh.MeshExternalService {
	m := &mesh.MeshExternalService{Meta: mesh.Meta{Name: name}}
	m.SetLabels(labels)
	m.Spec.Match = mesh.MESMatch{Type: "HostnameGenerator", Port: port, Protocol: "http"}
	m.Spec.Endpoints = []mesh.MESEndpoint{{Address: "192.168.0.1", Port: 9090}}
	return m
}

func hg(name, tpl string, tags mesh.Tags) *mesh.HostnameGenerator {
	return &mesh.HostnameGenerator{Meta: mesh.Meta{Name: name},
		Spec: mesh.HostnameGeneratorSpec{TargetRef: mesh.TargetRef{Kind: mesh.KindMeshExternalService, Tags: tags}, Template: tpl}}
}

func newAlloc(t testing.TB, mod func(*Config)) *Allocator {
	t.Helper()
	cfg := DefaultConfig()
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func allocate(t testing.TB, a *Allocator, s *mesh.Snapshot) *Table {
	t.Helper()
	tb, err := a.Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	checkTable(t, tb)
	return tb
}

// checkTable checks a table's indexes agree with its entry list.
func checkTable(t testing.TB, tb *Table) {
	t.Helper()
	n := 0
	seen := map[string]bool{}
	for i, e := range tb.Entries() {
		if i > 0 && entryLess(e, tb.Entries()[i-1]) {
			t.Fatalf("entries not sorted at %d: %s after %s", i, e.Key(), tb.Entries()[i-1].Key())
		}
		if e.Status != Available {
			if e.IPv4().IsValid() {
				t.Errorf("NotAvailable entry %s has a VIP", e.Key())
			}
			continue
		}
		n++
		if seen[e.Hostname()] {
			t.Errorf("two available entries for %s", e.Hostname())
		}
		seen[e.Hostname()] = true
		if got, ok := tb.Lookup(e.Hostname()); !ok || got != e {
			t.Errorf("Lookup(%s) = %v, %v", e.Hostname(), got, ok)
		}
		for _, ip := range []netip.Addr{e.IPv4(), e.IPv6()} {
			got, ok := tb.LookupAddr(ip)
			if !ok || got.IPv4() != e.IPv4() {
				t.Errorf("LookupAddr(%s) = %v, %v; want the owner of %s", ip, got, ok, e.IPv4())
			}
		}
	}
	if tb.Len() != n {
		t.Errorf("Len() = %d, want %d", tb.Len(), n)
	}
}

// vipsOf maps every available hostname to "v4 v6".
func vipsOf(tb *Table) map[string]string {
	m := map[string]string{}
	for _, e := range tb.Available() {
		m[e.Hostname()] = fmt.Sprintf("%s %s", e.IPv4(), e.IPv6())
	}
	return m
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func sizeofEntry() uintptr     { return unsafe.Sizeof(Entry{}) }
func sizeofCandidate() uintptr { return unsafe.Sizeof(candidate{}) }
func sizeofHostState() uintptr { return unsafe.Sizeof(hostState{}) }
