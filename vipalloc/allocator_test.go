package vipalloc

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

func smallMesh() []*mesh.Dataplane {
	return []*mesh.Dataplane{
		dp("web-1", svc("web", "v1", "zone-1")),
		dp("backend-v1-z1", svc("backend", "v1", "zone-1")),
		dp("backend-v2-z2", svc("backend", "v2", "zone-2")),
		dp("my-service-1", svc("my-service", "v1", "zone-1")),
		dp("legacy-1", mesh.TagsOf(map[string]string{mesh.ServiceTag: "legacy"})), // no version, no zone
	}
}

func TestVirtualOutboundDesignNames(t *testing.T) {
	a := newAlloc(t, nil)
	tb := allocate(t, a, snap(smallMesh(), designVOs()))

	want := map[string]struct {
		port   uint32
		origin Origin
		tags   mesh.Tags
	}{
		"httpbin.mesh":           {8080, Origin{mesh.KindVirtualOutbound, "my-service"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "my-service"})},
		"v1.backend.mesh":        {8080, Origin{mesh.KindVirtualOutbound, "my-service-by-version"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend", "version": "v1"})},
		"v2.backend.mesh":        {8080, Origin{mesh.KindVirtualOutbound, "my-service-by-version"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend", "version": "v2"})},
		"backend.mesh":           {80, Origin{mesh.KindVirtualOutbound, "default"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend"})},
		"legacy.mesh":            {80, Origin{mesh.KindVirtualOutbound, "default"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "legacy"})},
		"backend.zone-1.mesh":    {80, Origin{mesh.KindVirtualOutbound, "service-by-zone"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend", mesh.ZoneTag: "zone-1"})},
		"backend.zone-2.mesh":    {80, Origin{mesh.KindVirtualOutbound, "service-by-zone"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend", mesh.ZoneTag: "zone-2"})},
		"web.zone-1.mesh":        {80, Origin{mesh.KindVirtualOutbound, "service-by-zone"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "web", mesh.ZoneTag: "zone-1"})},
		"v1.web.mesh":            {8080, Origin{mesh.KindVirtualOutbound, "my-service-by-version"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "web", "version": "v1"})},
		"web.mesh":               {80, Origin{mesh.KindVirtualOutbound, "default"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"})},
		"my-service.mesh":        {80, Origin{mesh.KindVirtualOutbound, "default"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "my-service"})},
		"v1.my-service.mesh":     {8080, Origin{mesh.KindVirtualOutbound, "my-service-by-version"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "my-service", "version": "v1"})},
		"my-service.zone-1.mesh": {80, Origin{mesh.KindVirtualOutbound, "service-by-zone"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "my-service", mesh.ZoneTag: "zone-1"})},
	}
	if tb.Len() != len(want) {
		t.Errorf("Len = %d, want %d: %v", tb.Len(), len(want), vipsOf(tb))
	}
	svcPool := netip.MustParsePrefix("240.0.0.0/4")
	extPool := netip.MustParsePrefix("242.0.0.0/8")
	v6 := netip.MustParsePrefix("fd00:fd00::/64")
	for host, w := range want {
		e, ok := tb.Lookup(host + ".")
		if !ok {
			t.Errorf("%s: missing", host)
			continue
		}
		if !reflect.DeepEqual(e.Ports(), []uint32{w.port}) || e.Origin() != w.origin || !reflect.DeepEqual(e.Tags(), w.tags) {
			t.Errorf("%s: ports %v origin %v tags %v; want %d %v %v", host, e.Ports(), e.Origin(), e.Tags(), w.port, w.origin, w.tags)
		}
		if !svcPool.Contains(e.IPv4()) || extPool.Contains(e.IPv4()) || !v6.Contains(e.IPv6()) || e.IPv6().As16()[12] != e.IPv4().As4()[0] {
			t.Errorf("%s: VIPs %s %s outside the pools or not twins", host, e.IPv4(), e.IPv6())
		}
	}
	// The default <service>.mesh names lose to the explicit "default" VirtualOutbound.
	var lost int
	for _, e := range tb.Entries() {
		if e.Origin().Kind == OriginService {
			lost++
			if e.Status != NotAvailable || !strings.Contains(e.Reason(), `VirtualOutbound "default"`) {
				t.Errorf("default name %s: status %s reason %q", e.Hostname, e.Status, e.Reason())
			}
		}
	}
	if lost != 4 {
		t.Errorf("want 4 shadowed default names, got %d", lost)
	}
	// legacy has no zone: service-by-zone skips it with a reason; no version: by-version does not match.
	var skips []string
	for _, s := range tb.Skipped() {
		skips = append(skips, s.Key+": "+s.Reason)
	}
	if len(skips) != 1 || !strings.Contains(skips[0], `service-by-zone{kuma.io/service=legacy,kuma.io/zone=<missing>}`) ||
		!strings.Contains(skips[0], `"kuma.io/zone"`) {
		t.Errorf("skips = %q", skips)
	}
	// The skip has the one tag of the two its selector's tuples have.
	if sk := tb.Skipped(); len(sk) != 1 || !reflect.DeepEqual(sk[0].Tags, mesh.TagsOf(map[string]string{mesh.ServiceTag: "legacy"})) {
		t.Errorf("skips = %+v", sk)
	}
	// Outbounds carry the hostname, one per hostname and port.
	obs := tb.Outbounds()
	if len(obs) != len(want) {
		t.Errorf("%d outbounds, want %d", len(obs), len(want))
	}
	for _, ob := range obs {
		e, _ := tb.Lookup(ob.Hostname)
		if e == nil || e.IPv4() != ob.IPv4 || e.IPv6() != ob.IPv6 || ob.Port != e.Ports()[0] {
			t.Errorf("outbound %+v does not match its entry", ob)
		}
	}
}

func TestKeysAndExplainData(t *testing.T) {
	a := newAlloc(t, nil)
	tb := allocate(t, a, snap(smallMesh(), designVOs()))
	e, _ := tb.Lookup("v1.backend.mesh")
	if e.Key() != "my-service-by-version{kuma.io/service=backend,version=v1}" {
		t.Errorf("key = %q", e.Key())
	}
	if !reflect.DeepEqual(e.Selector(), mesh.TagsOf(map[string]string{mesh.ServiceTag: "*", "version": "*"})) {
		t.Errorf("selector = %v", e.Selector())
	}
	e, _ = tb.Lookup("httpbin.mesh")
	if e.Key() != "my-service{kuma.io/service=my-service}" {
		t.Errorf("key = %q", e.Key())
	}
}

func TestDefaultNamesOnOff(t *testing.T) {
	dps := smallMesh()
	on := allocate(t, newAlloc(t, nil), snap(dps, nil))
	if _, ok := on.Lookup("backend.mesh"); !ok {
		t.Fatal("backend.mesh missing with default names on")
	}
	if e, _ := on.Lookup("backend.mesh"); e.Origin() != (Origin{OriginService, "backend"}) || e.Ports()[0] != 80 {
		t.Errorf("backend.mesh = %+v", e)
	}
	off := allocate(t, newAlloc(t, func(c *Config) { c.DefaultServiceVIPs = false }), snap(dps, nil))
	if off.Len() != 0 {
		t.Errorf("default names off: %d names", off.Len())
	}
	port := allocate(t, newAlloc(t, func(c *Config) { c.DefaultPort = 8000 }), snap(dps, nil))
	if e, _ := port.Lookup("web.mesh"); e == nil || e.Ports()[0] != 8000 {
		t.Errorf("DefaultPort 8000: %+v", e)
	}
}

// A default name's tags are the inbound's own kuma.io/service tag, whatever other tags the
// inbound has (a Kubernetes pod's have a dozen): no tag set of its own per name.
func TestDefaultNameTagIsTheInbounds(t *testing.T) {
	web := dp("web-1", svc("web", "v1", "zone-1"))
	tb := allocate(t, newAlloc(t, nil), snap([]*mesh.Dataplane{web}, nil))
	e, ok := tb.Lookup("web.mesh")
	in := web.Networking.Inbound[0].Tags
	i := slices.IndexFunc(in, func(tg mesh.Tag) bool { return tg.Key == mesh.ServiceTag })
	if !ok || !reflect.DeepEqual(e.Tags(), mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"})) || &e.Tags()[0] != &in[i] {
		t.Errorf("web.mesh: %+v, its tag not the inbound's", e)
	}
}

// A policy tuple's tags are the run of the inbound's own tags that holds them when there is
// one (no tag set of its own), else a set of its own, never the expander's buffer.
func TestPolicyTupleTagsAreTheInbounds(t *testing.T) {
	web := dp("web-1", svc("web", "v1", "zone-1"))
	in := web.Networking.Inbound[0].Tags // kuma.io/service, kuma.io/zone, version
	byService := vo("by-service", "{{service}}.x", "80", map[string]string{mesh.ServiceTag: "service"},
		mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"}))
	byZone := vo("by-zone", "{{service}}.{{zone}}.x", "80", map[string]string{mesh.ServiceTag: "service", mesh.ZoneTag: "zone"},
		mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"}))
	byVersion := vo("by-version", "{{service}}.{{version}}.x", "80", map[string]string{mesh.ServiceTag: "service", "version": "version"},
		mesh.TagsOf(map[string]string{mesh.ServiceTag: "*"}))
	tb := allocate(t, newAlloc(t, func(c *Config) { c.DefaultServiceVIPs = false }),
		snap([]*mesh.Dataplane{web, dp("xapi-1", svc("xapi", "v2", "zone-2"))}, []*mesh.VirtualOutbound{byService, byZone, byVersion}))
	for host, want := range map[string]mesh.Tags{"web.x": in[:1], "web.zone-1.x": in[:2],
		"web.v1.x": {in[0], in[2]}} {
		e, ok := tb.Lookup(host)
		if !ok || !reflect.DeepEqual(e.Tags(), want) {
			t.Errorf("%s: %+v, want tags %v", host, e, want)
			continue
		}
		if inRun := &e.Tags()[0] == &in[0]; inRun != (len(want) != 2 || want[1] == in[1]) {
			t.Errorf("%s: tags in the inbound's set %v", host, inRun)
		}
	}
}

func TestCollisions(t *testing.T) {
	dps := smallMesh()
	older := vo("b-older", "shared.mesh", "80", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"}))
	older.SetCreationTime(ts("2024-01-01T00:00:00Z"))
	newer := vo("a-newer", "shared.mesh", "80", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend"}))
	newer.SetCreationTime(ts("2025-01-01T00:00:00Z"))
	otherPort := vo("c-port", "shared.mesh", "9090", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "legacy"}))
	otherPort.SetCreationTime(ts("2025-06-01T00:00:00Z"))
	sameAgeA := vo("x-a", "tie.mesh", "80", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"}))
	sameAgeB := vo("x-b", "tie.mesh", "80", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend"}))
	tb := allocate(t, newAlloc(t, nil), snap(dps, []*mesh.VirtualOutbound{older, newer, otherPort, sameAgeA, sameAgeB}))

	e, ok := tb.Lookup("shared.mesh")
	if !ok {
		t.Fatal("shared.mesh missing")
	}
	if e.Origin().Name != "b-older" || !reflect.DeepEqual(e.Ports(), []uint32{80, 9090}) || len(e.Targets()) != 2 ||
		!reflect.DeepEqual(e.Tags(), mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"})) {
		t.Fatalf("shared.mesh = %+v", e.Data())
	}
	if e.Targets()[1].Origin.Name != "c-port" || e.Targets()[1].Tags.Value(mesh.ServiceTag) != "legacy" ||
		e.Targets()[0].Tags.Value(mesh.ServiceTag) != "web" {
		t.Errorf("targets = %+v", e.Targets())
	}
	var obs []Outbound
	for _, ob := range tb.Outbounds() {
		if ob.Hostname == "shared.mesh" {
			obs = append(obs, ob)
		}
	}
	if len(obs) != 2 || obs[0].Port != 80 || obs[0].Tags.Value(mesh.ServiceTag) != "web" || obs[1].Port != 9090 ||
		obs[1].Tags.Value(mesh.ServiceTag) != "legacy" || obs[0].IPv4 != obs[1].IPv4 || obs[1].Origin.Name != "c-port" {
		t.Errorf("per-port outbounds = %+v", obs)
	}
	loser := findEntry(tb, "a-newer{kuma.io/service=backend}")
	if loser == nil || loser.Status != NotAvailable || !strings.Contains(loser.Reason(), `VirtualOutbound "b-older"`) ||
		!strings.Contains(loser.Reason(), "older") {
		t.Errorf("loser = %+v", loser)
	}
	tie, _ := tb.Lookup("tie.mesh")
	if tie == nil || tie.Origin().Name != "x-a" {
		t.Errorf("tie.mesh = %+v, want x-a by name", tie)
	}
	if l := findEntry(tb, "x-b{kuma.io/service=backend}"); l == nil || !strings.Contains(l.Reason(), `"x-a"`) {
		t.Errorf("tie loser = %+v", l)
	}
}

func findEntry(tb *Table, key string) *Entry {
	for _, e := range tb.Entries() {
		if e.Key() == key {
			return e
		}
	}
	return nil
}

func TestSticky(t *testing.T) {
	dps := smallMesh()
	vos := designVOs()
	a := newAlloc(t, nil)
	before := vipsOf(allocate(t, a, snap(dps, vos)))

	// Two runs give the same VIPs.
	if again := vipsOf(allocate(t, newAlloc(t, nil), snap(dps, vos))); !reflect.DeepEqual(before, again) {
		t.Errorf("a fresh allocator gave other VIPs:\n%v\n%v", before, again)
	}
	// Adding services moves nothing.
	more := append(append([]*mesh.Dataplane(nil), dps...), dp("new-1", svc("aaa-new", "v1", "zone-1")),
		dp("new-2", svc("zzz-new", "v9", "zone-3")))
	after := vipsOf(allocate(t, a, snap(more, vos)))
	for h, v := range before {
		if after[h] != v {
			t.Errorf("%s moved from %s to %s", h, v, after[h])
		}
	}
	if _, ok := after["v9.zzz-new.mesh"]; !ok {
		t.Error("new service has no name")
	}
	// Removing one moves nothing else either, and its names go.
	fewer := append([]*mesh.Dataplane(nil), more[1:]...) // drop web-1
	gone := vipsOf(allocate(t, a, snap(fewer, vos)))
	if _, ok := gone["web.mesh"]; ok {
		t.Error("web.mesh still there")
	}
	for h, v := range gone {
		if after[h] != v {
			t.Errorf("%s moved from %s to %s after a removal", h, after[h], v)
		}
	}
}

func TestPoolExhausted(t *testing.T) {
	// 240.0.0.0/30: .0 is the network and .3 the broadcast address, so two VIPs.
	a := newAlloc(t, func(c *Config) { c.ServiceCIDR = "240.0.0.0/30" })
	dps := []*mesh.Dataplane{dp("a", svc("a", "", "")), dp("b", svc("b", "", "")), dp("c", svc("c", "", ""))}
	tb := allocate(t, a, snap(dps, nil))
	if tb.Len() != 2 {
		t.Fatalf("Len = %d, want 2", tb.Len())
	}
	var full []*Entry
	for _, e := range tb.Entries() {
		if e.Status == Available {
			if v := e.IPv4().As4()[3]; v != 1 && v != 2 {
				t.Errorf("%s got %s", e.Hostname, e.IPv4())
			}
		} else {
			full = append(full, e)
		}
	}
	if len(full) != 1 || !strings.Contains(full[0].Reason(), "240.0.0.0/30 is exhausted") {
		t.Fatalf("exhausted entries = %+v", full)
	}
	// Freeing an address gives the waiting name a VIP on the next allocation.
	tb = allocate(t, a, snap(dps[1:], nil))
	if tb.Len() != 2 {
		t.Errorf("after freeing one: Len = %d, want 2 (%v)", tb.Len(), vipsOf(tb))
	}
}

func TestMeshExternalServices(t *testing.T) {
	dps := smallMesh()
	gen := hg("k8s-meshext-hostnames", "{{ name }}.svc.meshext.local", mesh.TagsOf(map[string]string{"my-service.io/access": "true"}))
	byLabel := hg("by-team", `{{ label "team" }}.{{ .Zone }}.ext.local`, mesh.TagsOf(map[string]string{"my-service.io/access": "true"}))
	mydomain := mes("mydomain", 80, map[string]string{"my-service.io/access": "true", mesh.MeshLabel: "default",
		mesh.ZoneTag: "east-1", "team": "payments"})
	noTeam := mes("noteam", 443, map[string]string{"my-service.io/access": "true"})
	ignored := mes("ignored", 80, map[string]string{"my-service.io/access": "true", mesh.IgnoreLabel: "true"})
	other := mes("other", 80, map[string]string{"x": "y"})
	tb := allocate(t, newAlloc(t, nil), snap(dps, nil, gen, byLabel, mydomain, noTeam, ignored, other))

	e, ok := tb.Lookup("mydomain.svc.meshext.local")
	if !ok || e.MeshExternalService() != "mydomain" || e.Ports()[0] != 80 ||
		!netip.MustParsePrefix("242.0.0.0/8").Contains(e.IPv4()) {
		t.Fatalf("mydomain = %+v", e)
	}
	e2, ok := tb.Lookup("payments.east-1.ext.local")
	if !ok || e2.IPv4() != e.IPv4() {
		t.Errorf("second hostname of mydomain = %+v; want the same VIP %s", e2, e.IPv4())
	}
	if ptr, _ := tb.LookupAddr(e.IPv4()); ptr == nil || ptr.Hostname != "mydomain.svc.meshext.local" {
		t.Errorf("PTR of a MES VIP = %+v", ptr)
	}
	// One outbound per VIP and port: the two hostnames of mydomain share one listener.
	var obs []Outbound
	for _, ob := range tb.Outbounds() {
		if ob.IPv4 == e.IPv4() {
			obs = append(obs, ob)
		}
	}
	if len(obs) != 1 || obs[0].MeshExternalService != "mydomain" || obs[0].Port != 80 {
		t.Errorf("outbounds of mydomain's VIP = %+v", obs)
	}
	st, ok := tb.MeshExternalServiceStatus("mydomain")
	want := MESStatus{VIP: MESVIP{Value: e.IPv4().String(), Type: "Kuma"}, Addresses: []MESAddress{
		{Hostname: "payments.east-1.ext.local", Status: Available, Origin: Origin{mesh.KindHostnameGenerator, "by-team"}},
		{Hostname: "mydomain.svc.meshext.local", Status: Available, Origin: Origin{mesh.KindHostnameGenerator, "k8s-meshext-hostnames"}},
	}}
	if !ok || !reflect.DeepEqual(st, want) {
		t.Errorf("status = %+v\nwant     %+v", st, want)
	}
	st, _ = tb.MeshExternalServiceStatus("noteam")
	if len(st.Addresses) != 2 || st.Addresses[0].Status != NotAvailable || !strings.Contains(st.Addresses[0].Reason, `label "team" is missing`) ||
		st.Addresses[1].Status != Available || st.VIP.Value == "" {
		t.Errorf("noteam status = %+v", st)
	}
	if _, ok := tb.MeshExternalServiceStatus("ignored"); ok {
		t.Error("kuma.io/ignore MES has a status")
	}
	if _, ok := tb.Lookup("ignored.svc.meshext.local"); ok {
		t.Error("kuma.io/ignore MES has a hostname")
	}
	if st, ok := tb.MeshExternalServiceStatus("other"); !ok || len(st.Addresses) != 0 || st.VIP.Value == "" {
		t.Errorf("unselected MES status = %+v, %v", st, ok)
	}
}

func TestMESCollidesWithMeshName(t *testing.T) {
	dps := smallMesh()
	clash := vo("clash", "ext.local", "8080", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"}))
	gen := hg("gen", "ext.local", nil)
	tb := allocate(t, newAlloc(t, nil), snap(dps, []*mesh.VirtualOutbound{clash}, gen, mes("m", 80, nil)))
	e, ok := tb.Lookup("ext.local")
	if !ok || e.Origin().Kind != mesh.KindHostnameGenerator || len(e.Ports()) != 1 {
		t.Fatalf("ext.local = %+v (HostnameGenerator sorts before VirtualOutbound at equal age)", e)
	}
	l := findEntry(tb, "clash{kuma.io/service=web}")
	if l == nil || l.Status != NotAvailable || !strings.Contains(l.Reason(), "cannot share a VIP") {
		t.Errorf("loser = %+v", l)
	}
	st, _ := tb.MeshExternalServiceStatus("m")
	if len(st.Addresses) != 1 || st.Addresses[0].Status != Available {
		t.Errorf("status = %+v", st)
	}
}

func TestPolicyChanges(t *testing.T) {
	dps := smallMesh()
	vos := designVOs()
	a := newAlloc(t, nil)
	first := vipsOf(allocate(t, a, snap(dps, vos)))
	// Drop the by-zone policy and change the by-version template.
	changed := []*mesh.VirtualOutbound{vos[0], vos[2],
		vo("my-service-by-version", "{{service}}-{{version}}.mesh", "8080",
			map[string]string{mesh.ServiceTag: "service", "version": "version"}, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*", "version": "*"}))}
	tb := allocate(t, a, snap(dps, changed))
	got := vipsOf(tb)
	for h := range got {
		if strings.Contains(h, "zone-") || strings.HasPrefix(h, "v1.") {
			t.Errorf("stale name %s", h)
		}
		if v, ok := first[h]; ok && v != got[h] {
			t.Errorf("%s moved", h)
		}
	}
	if _, ok := got["backend-v2.mesh"]; !ok {
		t.Errorf("changed template not applied: %v", got)
	}
	// Same state as a fresh allocator on the same snapshot (names; VIPs may differ by history).
	fresh := allocate(t, newAlloc(t, nil), snap(dps, changed))
	if !reflect.DeepEqual(keysOf(tb), keysOf(fresh)) {
		t.Errorf("incremental %v\nfresh       %v", keysOf(tb), keysOf(fresh))
	}
}

func keysOf(tb *Table) []string {
	var out []string
	for _, e := range tb.Entries() {
		out = append(out, e.Hostname+" "+e.Key()+" "+e.Status.String())
	}
	return out
}

func TestMeshSwitchAndNil(t *testing.T) {
	a := newAlloc(t, nil)
	if _, err := a.Allocate(nil); err == nil {
		t.Error("nil snapshot accepted")
	}
	allocate(t, a, snap(smallMesh(), designVOs()))
	s := snap([]*mesh.Dataplane{dp("x", svc("other", "", ""))}, nil)
	s.Mesh = "other"
	tb := allocate(t, a, s)
	if tb.Len() != 1 {
		t.Errorf("after a mesh switch: %v", vipsOf(tb))
	}
}

func TestUnsortedSnapshot(t *testing.T) {
	s := snap(smallMesh(), designVOs())
	want := keysOf(allocate(t, newAlloc(t, nil), s))
	a := newAlloc(t, nil)
	allocate(t, a, snap(smallMesh()[:2], designVOs()))
	rev := *s
	rev.Dataplanes = nil
	for i := len(s.Dataplanes) - 1; i >= 0; i-- {
		rev.Dataplanes = append(rev.Dataplanes, s.Dataplanes[i])
	}
	if got := keysOf(allocate(t, a, &rev)); !reflect.DeepEqual(got, want) {
		t.Errorf("dataplanes in reverse order:\n%v\nwant\n%v", got, want)
	}
}

func TestTemplateSyntaxes(t *testing.T) {
	kuma := vo("kuma-form", "{{.svc}}-{{.ver}}.mesh", "{{.port}}", nil, mesh.TagsOf(map[string]string{mesh.ServiceTag: "*", "version": "*"}))
	kuma.Conf.Parameters = []mesh.Parameter{{Name: "svc", TagKey: mesh.ServiceTag}, {Name: "ver", TagKey: "version"}, {Name: "port"}}
	vhForm := vo("vh-form", `{{tag "version"}}.{{tag "kuma.io/service"}}.vh.mesh`, "8080", nil,
		mesh.TagsOf(map[string]string{mesh.ServiceTag: "*", "version": "*"}))
	dps := []*mesh.Dataplane{
		dp("a", mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend", "version": "v1", "port": "9000"})),
		dp("b", mesh.TagsOf(map[string]string{mesh.ServiceTag: "backend", "version": "v2"})), // no port tag
	}
	tb := allocate(t, newAlloc(t, func(c *Config) { c.DefaultServiceVIPs = false }),
		snap(dps, []*mesh.VirtualOutbound{kuma, vhForm}))
	for host, port := range map[string]uint32{"backend-v1.mesh": 9000, "v1.backend.vh.mesh": 8080, "v2.backend.vh.mesh": 8080} {
		if e, ok := tb.Lookup(host); !ok || e.Ports()[0] != port {
			t.Errorf("%s = %+v, want port %d", host, e, port)
		}
	}
	if e, ok := tb.Lookup("v1.backend.vh.mesh"); ok && e.Key() != "vh-form{kuma.io/service=backend,version=v1}" {
		t.Errorf("key = %q", e.Key())
	}
	// The tuple without the port tag is skipped with a reason, not an error.
	if sk := tb.Skipped(); len(sk) != 1 || sk[0].Origin.Name != "kuma-form" || !strings.Contains(sk[0].Reason, `"port"`) {
		t.Errorf("skipped = %+v", sk)
	}
}
