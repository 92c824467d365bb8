package vipalloc

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

func meshService(name string, labels map[string]string, ports ...uint32) *mesh.MeshService {
	ms := &mesh.MeshService{Meta: mesh.Meta{Name: name}}
	ms.SetLabels(labels)
	ms.Spec.Selector.DataplaneTags = mesh.TagsOf(map[string]string{"app": name})
	for _, p := range ports {
		ms.Spec.Ports = append(ms.Spec.Ports, mesh.MeshServicePort{Port: p})
	}
	return ms
}

func msGen(name, tpl string) *mesh.HostnameGenerator {
	return &mesh.HostnameGenerator{Meta: mesh.Meta{Name: name},
		Spec: mesh.HostnameGeneratorSpec{TargetRef: mesh.TargetRef{Kind: mesh.KindMeshService}, Template: tpl}}
}

// Kuma's example mesh: every MeshService gets the names of the HostnameGenerators that
// select it (Kuma's template fields), one VIP from 241.0.0.0/8 shared by its names and an
// IPv6 twin, on each of its ports; its status lists them as Kuma shapes it.
func TestMeshServiceNamesAndVIPs(t *testing.T) {
	root := filepath.Join("..", "testdata", "kuma2")
	s, err := mesh.Load(filepath.Join(root, "dataplane.yaml"), filepath.Join(root, "universal"))
	if err != nil {
		t.Fatal(err)
	}
	tb := allocate(t, newAlloc(t, nil), s)
	pool := netip.MustParsePrefix(DefaultMeshServiceCIDR)
	want := map[string][]uint32{
		"backend.kuma-demo.mesh": {3001}, "backend.svc.mesh.local": {3001},
		"backend-v2.kuma-demo.mesh": {3001}, "backend-v2.svc.mesh.local": {3001},
		"redis.svc.mesh.local": {6739, 16739}, // redis-system is not selected by `all`
	}
	for h, ports := range want {
		e, ok := tb.Lookup(h)
		if !ok {
			t.Errorf("%s not served", h)
			continue
		}
		if !pool.Contains(e.IPv4()) || !slices.Equal(e.Ports(), ports) || e.MeshService() == "" {
			t.Errorf("%s: %s ports %v MeshService %q; want a VIP in %s, ports %v", h, e.IPv4(), e.Ports(), e.MeshService(), pool, ports)
		}
		if ip6, _ := tb.Lookup(h); ip6.IPv6() != twin(netip.MustParsePrefix(DefaultIPv6Prefix), v4u(e.IPv4())) {
			t.Errorf("%s: IPv6 %s is not the twin of %s", h, ip6.IPv6(), e.IPv4())
		}
	}
	if _, ok := tb.Lookup("redis.kuma-demo.mesh"); ok {
		t.Error("redis.kuma-demo.mesh served: `all` selects namespace kuma-demo only")
	}
	a, _ := tb.Lookup("backend.kuma-demo.mesh")
	b, _ := tb.Lookup("backend.svc.mesh.local")
	if a.IPv4() != b.IPv4() {
		t.Errorf("backend's names have VIPs %s and %s, want one", a.IPv4(), b.IPv4())
	}
	st, ok := tb.MeshServiceStatus("backend")
	if !ok || len(st.VIPs) != 1 || st.VIPs[0].IP != a.IPv4().String() || len(st.Addresses) != 2 ||
		st.Addresses[0].Origin != "HostnameGenerator" || st.Addresses[0].HostnameGeneratorRef.CoreName != "all" ||
		st.Addresses[0].Hostname != "backend.kuma-demo.mesh" || st.Addresses[0].Status != Available {
		t.Errorf("backend's status %+v", st)
	}
	// Outbounds: one per port, naming the MeshService.
	n := 0
	for _, ob := range tb.Outbounds() {
		if ob.MeshService == "redis" {
			n++
		}
	}
	if n != 2 {
		t.Errorf("redis has %d outbounds, want one per port (2)", n)
	}
}

// A MeshService's VIP is sticky: a new MeshService or service never moves it, a restart
// with the state file keeps it, and no VIP is handed out twice though the MeshService pool
// lies inside the service pool.
func TestMeshServiceVIPsSticky(t *testing.T) {
	self := dp("web-1", svc("web", "v1", "zone-1"))
	gen := msGen("local", "{{ .DisplayName }}.svc.mesh.local")
	var mss []mesh.Resource
	dps := []*mesh.Dataplane{self}
	for i := range 200 {
		mss = append(mss, meshService(fmt.Sprintf("ms-%03d", i), nil, 80))
		dps = append(dps, dp(fmt.Sprintf("dp-%03d", i), svc(fmt.Sprintf("svc-%03d", i), "v1", "zone-1")))
	}
	state := filepath.Join(t.TempDir(), "vips.json")
	a := newAlloc(t, func(c *Config) { c.StateFile = state })
	before := vipsOf(allocate(t, a, snap(dps, nil, append([]mesh.Resource{gen}, mss...)...)))
	// A newcomer sorting first in each kind.
	more := append([]mesh.Resource{gen, meshService("aaa", nil, 80)}, mss...)
	moreDPs := append(slices.Clone(dps), dp("aaa-0", svc("aaa", "v1", "zone-1")))
	after := allocate(t, a, snap(moreDPs, nil, more...))
	for h, v := range before {
		if got := vipsOf(after)[h]; got != v {
			t.Errorf("%s moved from %s to %s when a MeshService and a service were added", h, v, got)
		}
	}
	seen := map[netip.Addr]string{}
	for _, e := range after.Available() {
		if other, dup := seen[e.IPv4()]; dup && e.MeshService() == "" {
			t.Errorf("%s and %s share %s", e.Hostname(), other, e.IPv4())
		}
		seen[e.IPv4()] = e.Hostname()
	}
	a.Flush()
	restarted := allocate(t, newAlloc(t, func(c *Config) { c.StateFile = state }), snap(moreDPs, nil, more...))
	for h, v := range vipsOf(after) {
		if got := vipsOf(restarted)[h]; got != v {
			t.Errorf("%s: %s after a restart, was %s", h, got, v)
		}
	}
}

// A mesh mixing the older API and the newer: a VirtualOutbound and a HostnameGenerator
// rendering one hostname follow the one collision rule (a policy beats a default name,
// then the older wins, then kind and name): the older VirtualOutbound keeps the name, the
// MeshService's entry says what took it, and its status shows it NotAvailable.
func TestMeshServiceCollidesWithVirtualOutbound(t *testing.T) {
	self := dp("web-1", svc("web", "v1", "zone-1"))
	backend := dp("backend-1", svc("backend", "v1", "zone-1"))
	old := vo("legacy", "{{service}}.svc.mesh.local", "80", map[string]string{mesh.ServiceTag: "service"},
		mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend"}))
	old.SetCreationTime(ts("2024-01-01T00:00:00Z"))
	gen := msGen("local", "{{ .DisplayName }}.svc.mesh.local")
	gen.SetCreationTime(ts("2025-01-01T00:00:00Z"))
	tb := allocate(t, newAlloc(t, nil), snap([]*mesh.Dataplane{self, backend}, []*mesh.VirtualOutbound{old}, gen, meshService("backend", nil, 80)))
	e, ok := tb.Lookup("backend.svc.mesh.local")
	if !ok || e.Origin().Kind != mesh.KindVirtualOutbound {
		t.Fatalf("backend.svc.mesh.local: %+v, want the older VirtualOutbound's", e)
	}
	st, _ := tb.MeshServiceStatus("backend")
	if len(st.Addresses) != 1 || st.Addresses[0].Status != NotAvailable ||
		st.Addresses[0].Reason != `hostname "backend.svc.mesh.local" is taken by VirtualOutbound "legacy" (legacy{kuma.io/service=backend}), which wins (it is older); a MeshService's hostnames share its VIP, no other hostname's` {
		t.Errorf("the MeshService's address: %+v", st.Addresses)
	}
	// The other way round, the MeshService's generator is older and wins.
	gen.SetCreationTime(ts("2023-01-01T00:00:00Z"))
	tb = allocate(t, newAlloc(t, nil), snap([]*mesh.Dataplane{self, backend}, []*mesh.VirtualOutbound{old}, gen, meshService("backend", nil, 80)))
	if e, ok := tb.Lookup("backend.svc.mesh.local"); !ok || e.MeshService() != "backend" {
		t.Errorf("backend.svc.mesh.local: %+v, want the older generator's MeshService", e)
	}
}

// The MeshService pool inside the service pool: with both small, every address is handed
// out once, to a service name or to a MeshService, never to both (6 services and 2
// MeshServices for 6 addresses: the MeshServices take 2, 4 services the others).
func TestMeshServicePoolSharesTheServicePool(t *testing.T) {
	self := dp("web-1", svc("web", "v1", "zone-1"))
	dps := []*mesh.Dataplane{self}
	extra := []mesh.Resource{msGen("local", "{{ .DisplayName }}.svc.mesh.local")}
	for i := range 5 {
		dps = append(dps, dp(fmt.Sprintf("dp-%d", i), svc(fmt.Sprintf("svc-%d", i), "v1", "zone-1")))
	}
	extra = append(extra, meshService("ms-0", nil, 80), meshService("ms-1", nil, 80))
	a := newAlloc(t, func(c *Config) { c.ServiceCIDR, c.MeshServiceCIDR = "10.0.0.0/29", "10.0.0.0/30" })
	tb := allocate(t, a, snap(dps, nil, extra...))
	seen := map[netip.Addr]string{}
	for _, e := range tb.Available() {
		if other, dup := seen[e.IPv4()]; dup {
			t.Errorf("%s and %s share %s", e.Hostname(), other, e.IPv4())
		}
		seen[e.IPv4()] = e.Hostname()
	}
	if len(seen) != 6 {
		t.Errorf("%d names with a VIP, want 6: %v", len(seen), vipsOf(tb))
	}
}
