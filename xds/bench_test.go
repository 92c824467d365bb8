package xds

import (
	"fmt"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// bigWorld: n services, each with two dataplanes (versions 1 and 2) and one VIP outbound;
// every 10th service has a TrafficRoute splitting it 90/10 between its versions.
func bigWorld(tb testing.TB, n int) (*mesh.Snapshot, *vipalloc.Table) {
	tb.Helper()
	var res []mesh.Resource
	var entries []*vipalloc.Entry
	for i := 0; i < n; i++ {
		svc := fmt.Sprintf("svc-%05d", i)
		for v := 1; v <= 2; v++ {
			res = append(res, dataplane(fmt.Sprintf("%s-%d", svc, v), fmt.Sprintf("10.%d.%d.%d", v, i/256, i%256),
				inbound(8080, tags(mesh.ServiceTag, svc, "version", fmt.Sprint(v)))))
		}
		a4 := netip.AddrFrom4([4]byte{240, 0, byte(i >> 8), byte(i)})
		a6 := netip.AddrFrom16([16]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 240, 0, byte(i >> 8), byte(i)})
		entries = append(entries, serviceEntry(svc+".mesh", a4.String(), a6.String(), 80, tags(mesh.ServiceTag, svc)))
		if i%10 == 0 {
			res = append(res, trafficRoute("route-"+svc, i, tags(mesh.ServiceTag, "mobile"), tags(mesh.ServiceTag, svc),
				to(90, tags(mesh.ServiceTag, svc, "version", "1")), to(10, tags(mesh.ServiceTag, svc, "version", "2"))))
		}
	}
	s, err := mesh.NewSnapshot(mobile(tags(mesh.ServiceTag, "mobile")), res)
	if err != nil {
		tb.Fatal(err)
	}
	return s, vipalloc.NewTable(entries, nil)
}

// BenchmarkGenerateValidate10k: 10,000 outbounds (20,000 listeners with the IPv6 twins),
// 1,000 TrafficRoutes: generate and validate everything.
func BenchmarkGenerateValidate10k(b *testing.B) {
	s, tab := bigWorld(b, 10000)
	b.ResetTimer()
	cpu := startCPU()
	for b.Loop() {
		r, err := Generate(s, tab, tproxy)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Validate(); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

// BenchmarkOneOutboundChange10k: the same world served by a Server; each iteration one
// TrafficRoute (one outbound) appears or disappears: incremental generation, validation of
// what is new, hashing of what is new, and the published snapshot (what Envoy gets as a delta).
func BenchmarkOneOutboundChange10k(b *testing.B) { benchOneChange(b, true) }

// BenchmarkOneOutboundChangeFull10k is the peer: the same change handled by a full
// Generate (no memory) and the same Server.Update.
func BenchmarkOneOutboundChangeFull10k(b *testing.B) { benchOneChange(b, false) }

func benchOneChange(b *testing.B, incremental bool) {
	base, tab := bigWorld(b, 10000)
	extra := trafficRoute("one-more", 99999, tags(mesh.ServiceTag, "mobile"), tags(mesh.ServiceTag, "svc-00005"),
		to(50, tags(mesh.ServiceTag, "svc-00005", "version", "1")), to(50, tags(mesh.ServiceTag, "svc-00005", "version", "2")))
	res := []mesh.Resource{}
	for _, d := range base.Dataplanes[1:] {
		res = append(res, d)
	}
	for _, r := range base.TrafficRoutes {
		res = append(res, r)
	}
	changed, err := mesh.NewSnapshot(base.Self, append(res, extra))
	if err != nil {
		b.Fatal(err)
	}
	gen := NewGenerator()
	srv := NewServer("/nonexistent/unused.sock", nil)
	publish := func(s *mesh.Snapshot) *Resources {
		generate := gen.Generate
		if !incremental {
			generate = Generate
		}
		r, err := generate(s, tab, tproxy)
		if err != nil {
			b.Fatal(err)
		}
		if err := srv.Update(r); err != nil { // Update validates
			b.Fatal(err)
		}
		return r
	}
	full := publish(base)
	one := publish(changed)
	if n := changedListeners(full, one); incremental && n != 2 {
		b.Fatalf("%d listeners changed, want 2 (the outbound and its IPv6 twin)", n)
	}
	snaps := []*mesh.Snapshot{base, changed}
	b.ResetTimer()
	cpu := startCPU()
	i := 0
	for b.Loop() {
		publish(snaps[i%2])
		i++
	}
	cpu.report(b)
}

func changedListeners(a, b *Resources) int {
	old := map[string]any{}
	for _, l := range a.Listeners {
		old[l.Name] = l
	}
	n := 0
	for _, l := range b.Listeners {
		if old[l.Name] != any(l) {
			n++
		}
	}
	return n
}

// cpuClock reports CPU time (user+system, all threads) per operation besides wall time:
// the machine is shared, so wall time alone overstates the cost when others are busy.
type cpuClock struct{ start time.Duration }

func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPU() cpuClock { return cpuClock{start: cpuNow()} }

func (c cpuClock) report(b *testing.B) {
	b.ReportMetric(float64(cpuNow()-c.start)/float64(b.N)/1e6, "cpu-ms/op")
}

// BenchmarkServerUpdateOneChange10k: only the publishing side - Update (validation of the
// new messages, hashing, snapshot) when one outbound's listeners changed.
func BenchmarkServerUpdateOneChange10k(b *testing.B) {
	base, tab := bigWorld(b, 10000)
	gen := NewGenerator()
	r1, _ := gen.Generate(base, tab, tproxy)
	res := []mesh.Resource{}
	for _, d := range base.Dataplanes[1:] {
		res = append(res, d)
	}
	for _, r := range base.TrafficRoutes {
		res = append(res, r)
	}
	changed, _ := mesh.NewSnapshot(base.Self, append(res, trafficRoute("one-more", 99999, tags(mesh.ServiceTag, "mobile"), tags(mesh.ServiceTag, "svc-00005"),
		to(50, tags(mesh.ServiceTag, "svc-00005", "version", "1")), to(50, tags(mesh.ServiceTag, "svc-00005", "version", "2")))))
	r2, _ := gen.Generate(changed, tab, tproxy)
	srv := NewServer("/nonexistent/unused.sock", nil)
	rs := []*Resources{r1, r2}
	for _, r := range rs {
		if err := srv.Update(r); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cpu := startCPU()
	i := 0
	for b.Loop() {
		if err := srv.Update(rs[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	cpu.report(b)
}

// meshServiceWorld: n MeshServices (one port each, selecting app: svc-i), each with two
// dataplanes and a VIP; every 10th has a MeshHTTPRoute splitting it 90/10 between its
// versions.
func meshServiceWorld(tb testing.TB, n int) (*mesh.Snapshot, *vipalloc.Table) {
	tb.Helper()
	var res []mesh.Resource
	for i := 0; i < n; i++ {
		svc := fmt.Sprintf("svc-%05d", i)
		for v := 1; v <= 2; v++ {
			res = append(res, dataplane(fmt.Sprintf("%s-%d", svc, v), fmt.Sprintf("10.%d.%d.%d", v, i/256, i%256),
				inbound(8080, tags(mesh.ServiceTag, svc, "app", svc, "version", fmt.Sprint(v), mesh.ProtocolTag, "http"))))
		}
		ms := &mesh.MeshService{Meta: mesh.Meta{Name: svc}}
		ms.Spec.Selector.DataplaneTags = tags("app", svc)
		ms.Spec.Ports = []mesh.MeshServicePort{{Port: 80, TargetPort: uint32(8080), AppProtocol: "http"}}
		res = append(res, ms)
		if i%10 == 0 {
			w := uint32(90)
			rt := &mesh.MeshHTTPRoute{Meta: mesh.Meta{Name: "route-" + svc}}
			rt.Spec.To = []mesh.MeshHTTPRouteTo{{TargetRef: mesh.PolicyRef{Kind: mesh.KindMeshService, Name: svc},
				Rules: []mesh.MeshHTTPRouteRule{{Default: mesh.RouteDefault{BackendRefs: []mesh.RouteBackendRef{
					{PolicyRef: mesh.PolicyRef{Kind: mesh.RefMeshServiceSubset, Name: svc, Tags: tags("version", "1")}, Weight: &w},
					{PolicyRef: mesh.PolicyRef{Kind: mesh.RefMeshServiceSubset, Name: svc, Tags: tags("version", "2")}}}}}}}}
			res = append(res, rt)
		}
	}
	res = append(res, &mesh.HostnameGenerator{Meta: mesh.Meta{Name: "local"},
		Spec: mesh.HostnameGeneratorSpec{TargetRef: mesh.TargetRef{Kind: mesh.KindMeshService}, Template: "{{ .DisplayName }}.mesh.local"}})
	s, err := mesh.NewSnapshot(mobile(tags(mesh.ServiceTag, "mobile")), res)
	if err != nil {
		tb.Fatal(err)
	}
	a, err := vipalloc.New(vipalloc.DefaultConfig())
	if err != nil {
		tb.Fatal(err)
	}
	t, err := a.Allocate(s)
	if err != nil {
		tb.Fatal(err)
	}
	return s, t
}

// BenchmarkGenerateValidateMeshServices10k: 10,000 MeshServices (20,000 dataplanes), 1,000
// MeshHTTPRoutes: generate and validate everything (what every change of such a mesh costs:
// it is generated in full).
func BenchmarkGenerateValidateMeshServices10k(b *testing.B) {
	s, tab := meshServiceWorld(b, 10000)
	b.ResetTimer()
	cpu := startCPU()
	for b.Loop() {
		r, err := Generate(s, tab, tproxy)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Validate(); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}
