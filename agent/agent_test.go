package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/internal/testutil"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// CoreDNS's forward plugin frees its pooled upstream connections on GC, not on
		// shutdown (docs/dns.md, embedding pitfall 3).
		goleak.IgnoreTopFunction("github.com/coredns/coredns/plugin/pkg/proxy.(*Transport).connManager"),
		goleak.IgnoreAnyFunction("github.com/coredns/coredns/plugin/pkg/up.(*Probe).Do.func1"),
	)
}

// The lifecycle tests below compose the agent with small in-memory parts, so that each
// ordering and timing rule is checked on its own; the end-to-end tests in cmd/kuma-dp run
// the real binary with the real parts.

type memSource struct {
	first   cplink.Update
	updates chan cplink.Update
	reloads atomic.Int32
}

func (s *memSource) Load(context.Context) cplink.Update { return s.first }
func (s *memSource) Reload()                            { s.reloads.Add(1) }
func (s *memSource) Run(ctx context.Context, out chan<- cplink.Update) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case u := <-s.updates:
			select {
			case out <- u:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// serviceAllocator gives every inbound service `<service>.mesh` a VIP, in name order.
type serviceAllocator struct{}

func (serviceAllocator) Flush() {}

func (serviceAllocator) Allocate(s *mesh.Snapshot) (*vipalloc.Table, error) {
	var entries []*vipalloc.Entry
	seen := map[string]bool{}
	for _, dp := range s.Dataplanes {
		for _, in := range dp.Networking.Inbound {
			svc := in.Tags.Value(mesh.ServiceTag)
			if svc == "" || seen[svc] {
				continue
			}
			seen[svc] = true
			n := len(entries) + 1
			entries = append(entries, vipalloc.NewEntry(vipalloc.EntryData{Hostname: svc + ".mesh", Ports: []uint32{80},
				IPv4: netip.AddrFrom4([4]byte{240, 0, 0, byte(n)}), Status: vipalloc.Available,
				Origin: vipalloc.Origin{Kind: vipalloc.OriginService, Name: svc}, Tags: mesh.TagsOf(map[string]string{mesh.ServiceTag: svc})}))
		}
	}
	return vipalloc.NewTable(entries, nil), nil
}

type memDNS struct {
	ready   chan struct{}
	table   atomic.Pointer[vipalloc.Table]
	running atomic.Bool
	stopped atomic.Int64 // unix nanos of stop
}

func newMemDNS() *memDNS { return &memDNS{ready: make(chan struct{})} }

func (d *memDNS) Swap(t *vipalloc.Table) { d.table.Store(t) }
func (d *memDNS) Run(ctx context.Context) error {
	d.running.Store(true)
	close(d.ready)
	<-ctx.Done()
	d.running.Store(false)
	d.stopped.Store(time.Now().UnixNano())
	return nil
}
func (d *memDNS) Ready() <-chan struct{} { return d.ready }
func (d *memDNS) Addrs() (udp, tcp []net.Addr) {
	return []net.Addr{&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}, []net.Addr{&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}}
}
func (d *memDNS) MetricsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "# TYPE test_dns_queries_total counter\ntest_dns_queries_total 7")
	})
}

func (d *memDNS) lookup(name string) (netip.Addr, bool) {
	e, ok := d.table.Load().Lookup(name)
	if !ok {
		return netip.Addr{}, false
	}
	return e.IPv4(), true
}

func snapshot(t *testing.T, services ...string) *mesh.Snapshot {
	t.Helper()
	self := &mesh.Dataplane{Meta: mesh.Meta{Mesh: "default", Name: "web-1", Source: mesh.NewSource("dp.yaml", 1)},
		Networking: mesh.Networking{Address: "10.0.0.1", Inbound: []mesh.Inbound{{Port: 8080, Tags: mesh.TagsOf(map[string]string{mesh.ServiceTag: "web"})}}}}
	var rs []mesh.Resource
	for i, s := range services {
		rs = append(rs, &mesh.Dataplane{Meta: mesh.Meta{Mesh: "default", Name: fmt.Sprintf("%s-%d", s, i)},
			Networking: mesh.Networking{Address: "10.0.1.1", Inbound: []mesh.Inbound{{Port: 80, Tags: mesh.TagsOf(map[string]string{mesh.ServiceTag: s})}}}})
	}
	snap, err := mesh.NewSnapshot(self, rs)
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

type harness struct {
	t      *testing.T
	a      *Agent
	src    *memSource
	dns    *memDNS
	logs   *testutil.LockedBuffer
	cancel context.CancelFunc
	done   chan error
	admin  string
}

// memEnvoy stands in for Envoy: always live, its drain lasts until cancelled.
type memEnvoy struct{ drains atomic.Int32 }

func (e *memEnvoy) Update(*mesh.Snapshot, *vipalloc.Table) (any, error) { return nil, nil }
func (e *memEnvoy) Run(ctx context.Context) error                       { <-ctx.Done(); return nil }
func (e *memEnvoy) Live() bool                                          { return true }
func (e *memEnvoy) Drain(ctx context.Context, _ time.Duration) error {
	e.drains.Add(1)
	<-ctx.Done()
	return nil
}

func startAgent(t *testing.T, cfg Config, first cplink.Update, with ...func(*Parts)) *harness {
	t.Helper()
	h := &harness{t: t, src: &memSource{first: first, updates: make(chan cplink.Update)}, dns: newMemDNS(), logs: &testutil.LockedBuffer{}}
	cfg.Admin.Address = "127.0.0.1:0"
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	parts := Parts{Source: h.src, Allocator: serviceAllocator{}, DNS: h.dns}
	for _, w := range with {
		w(&parts)
	}
	a, err := New(cfg, parts, log, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	h.a = a
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan error, 1)
	go func() { h.done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		a.Abort()
		select {
		case <-h.done:
		case <-time.After(5 * time.Second):
			t.Error("Run did not return")
		}
	})
	for i := 0; a.AdminAddr() == nil; i++ {
		if i > 1000 {
			t.Fatal("admin endpoint not bound")
		}
		time.Sleep(time.Millisecond)
	}
	h.admin = "http://" + a.AdminAddr().String()
	return h
}

func (h *harness) get(path string) (int, string) {
	h.t.Helper()
	resp, err := http.Get(h.admin + path)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (h *harness) waitReady() {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if code, _ := h.get("/ready"); code == 200 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	h.t.Fatalf("not ready; logs:\n%s", h.logs)
}

func (h *harness) send(u cplink.Update) {
	select {
	case h.src.updates <- u:
	case <-time.After(2 * time.Second):
		h.t.Fatal("agent did not take the update")
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testConfig() Config {
	c := Defaults()
	c.Runtime.DataplaneFile = "dp.yaml"
	c.Dataplane.DrainTime = Duration(300 * time.Millisecond)
	return c
}

func TestAgentServesAndReloads(t *testing.T) {
	h := startAgent(t, testConfig(), cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"})
	h.waitReady()
	if _, ok := h.dns.lookup("httpbin.mesh"); !ok {
		t.Fatal("httpbin.mesh not served after start")
	}

	// A valid change reaches DNS.
	h.send(cplink.Update{Snapshot: snapshot(t, "httpbin", "backend"), Trigger: "watch"})
	eventually(t, "backend.mesh", func() bool { _, ok := h.dns.lookup("backend.mesh"); return ok })

	// A refused change keeps the last good table, and the log names the file and field.
	before := h.dns.table.Load()
	h.send(cplink.Update{Trigger: "watch", Err: mesh.Errors{{Source: "policies/vo.yaml#2", Kind: mesh.KindVirtualOutbound,
		Name: "by-version", Path: "conf.host", Value: "{{nope}}", Msg: `template: function "nope" not defined`}}})
	eventually(t, "refusal logged", func() bool { return strings.Contains(h.logs.String(), "policies/vo.yaml#2") })
	if h.dns.table.Load() != before {
		t.Fatal("a refused change replaced the table")
	}
	log := h.logs.String()
	for _, want := range []string{"change refused", "field=conf.host", `value={{nope}}`} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}

	// The same content again is skipped.
	h.send(cplink.Update{Snapshot: snapshot(t, "httpbin", "backend"), Trigger: "watch"})
	eventually(t, "unchanged counted", func() bool {
		_, m := h.get("/metrics")
		return strings.Contains(m, `kuma_dp_model_reloads_total{result="unchanged"} 1`)
	})
	if h.dns.table.Load() != before {
		t.Fatal("an unchanged model replaced the table")
	}

	_, m := h.get("/metrics")
	// One valid exposition: the agent's and the resolver's metrics, no family twice.
	parser := expfmt.NewTextParser(model.UTF8Validation)
	if _, err := parser.TextToMetricFamilies(strings.NewReader(m)); err != nil {
		t.Errorf("/metrics does not parse: %v", err)
	}
	for _, want := range []string{
		`kuma_dp_model_reloads_total{result="applied"} 2`,
		`kuma_dp_model_reloads_total{result="refused"} 1`,
		`kuma_dp_vip_entries{status="Available"} 3`,
		`kuma_dp_vip_pool_used{pool="service"} 3`,
		"kuma_dp_ready 1",
		`kuma_dp_build_info{goversion="`, // the build's version (internal/buildinfo)
		"kuma_dp_model_reload_duration_seconds_count 2",
		"test_dns_queries_total 7", // the resolver's own metrics, on the same page
	} {
		if !strings.Contains(m, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	h.a.Reload()
	if h.src.reloads.Load() != 1 {
		t.Error("Reload did not reach the source")
	}
}

func TestAgentAdminEndpoints(t *testing.T) {
	h := startAgent(t, testConfig(), cplink.Update{Snapshot: snapshot(t, "httpbin", "backend"), Trigger: "start"})
	h.waitReady()

	// / lists every endpoint, and each one listed answers 200
	code, body := h.get("/")
	if code != 200 {
		t.Fatalf("/: %d", code)
	}
	for _, ep := range []string{"/ready", "/vips", "/config_dump", "/metrics"} {
		if !strings.Contains(body, ep) {
			t.Errorf("/ does not list %s:\n%s", ep, body)
		}
		if c, _ := h.get(ep); c != 200 {
			t.Errorf("%s listed but answers %d", ep, c)
		}
	}
	if c, _ := h.get("/nope"); c != 404 {
		t.Errorf("/nope: %d, want 404", c)
	}

	code, body = h.get("/vips")
	var vips struct {
		Skipped              []json.RawMessage          `json:"skipped"`
		MeshExternalServices map[string]json.RawMessage `json:"meshExternalServices"`
		Entries              []struct {
			Hostname string `json:"hostname"`
			IPv4     string `json:"ipv4"`
			Status   string `json:"status"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(body), &vips); code != 200 || err != nil {
		t.Fatalf("/vips: %d %v\n%s", code, err, body)
	}
	if vips.Skipped == nil || vips.MeshExternalServices == nil {
		t.Errorf("/vips lacks skipped or meshExternalServices: %s", body)
	}
	if len(vips.Entries) != 3 || vips.Entries[0].Hostname != "backend.mesh" || vips.Entries[0].Status != "Available" || vips.Entries[0].IPv4 == "" {
		t.Fatalf("/vips: %+v", vips.Entries)
	}

	code, body = h.get("/config_dump")
	var dump struct {
		Model struct {
			Mesh string
			Self struct{ Name string }
		} `json:"model"`
		Vips  []json.RawMessage `json:"vips"`
		Envoy any               `json:"envoy"`
	}
	if err := json.Unmarshal([]byte(body), &dump); code != 200 || err != nil {
		t.Fatalf("/config_dump: %d %v", code, err)
	}
	if dump.Model.Mesh != "default" || dump.Model.Self.Name != "web-1" || len(dump.Vips) != 3 {
		t.Fatalf("/config_dump: %+v", dump)
	}
	if code, _ := h.get("/nope"); code != 404 {
		t.Errorf("unknown path: %d", code)
	}
}

func TestAgentRefusesInvalidFirstModel(t *testing.T) {
	logs := &testutil.LockedBuffer{}
	cfg := testConfig()
	cfg.Admin.Address = "127.0.0.1:0"
	src := &memSource{first: cplink.Update{Trigger: "start", Err: mesh.Errors{{Source: "dp.yaml#1", Path: "networking.address", Value: "x", Msg: "not an IP"}}}}
	dns := newMemDNS()
	a, _ := New(cfg, Parts{Source: src, Allocator: serviceAllocator{}, DNS: dns}, slog.New(slog.NewTextHandler(logs, nil)), time.Time{})
	err := a.Run(context.Background())
	var invalid *InvalidModelError
	if !errors.As(err, &invalid) {
		t.Fatalf("want InvalidModelError, got %v", err)
	}
	if dns.running.Load() || !strings.Contains(logs.String(), "field=networking.address") {
		t.Fatalf("DNS started or log lacks the field:\n%s", logs)
	}
}

func TestAgentRefusesAnotherDataplane(t *testing.T) {
	cfg := testConfig()
	cfg.Dataplane.Name = "other"
	cfg.Admin.Address = "127.0.0.1:0"
	logs := &testutil.LockedBuffer{}
	a, _ := New(cfg, Parts{Source: &memSource{first: cplink.Update{Snapshot: snapshot(t)}}, Allocator: serviceAllocator{}, DNS: newMemDNS()},
		slog.New(slog.NewTextHandler(logs, nil)), time.Time{})
	err := a.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), `does not match --name "other"`) {
		t.Fatalf("got %v", err)
	}
}

func TestAgentDrainsThenStops(t *testing.T) {
	cfg := testConfig()
	cfg.Dataplane.DrainTime = Duration(400 * time.Millisecond)
	envoy := &memEnvoy{}
	h := startAgent(t, cfg, cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"}, func(p *Parts) { p.Envoy = envoy })
	h.waitReady()
	start := time.Now()
	h.cancel()
	eventually(t, "503 TERMINATING", func() bool {
		code, body := h.get("/ready")
		return code == 503 && strings.TrimSpace(body) == "TERMINATING"
	})
	if !h.dns.running.Load() {
		t.Fatal("DNS stopped before the drain time")
	}
	select {
	case err := <-h.done:
		h.done <- err
		took := time.Since(start)
		if err != nil || took < 400*time.Millisecond || took > 3*time.Second {
			t.Fatalf("Run returned %v after %v, want nil after the 400ms drain", err, took)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Run did not return")
	}
	if h.dns.running.Load() {
		t.Fatal("DNS still running after Run returned")
	}
	if envoy.drains.Load() != 1 {
		t.Fatalf("Envoy drained %d times, want once", envoy.drains.Load())
	}
}

// Without Envoy there is nothing to drain: a SIGTERM stops the agent at once, whatever the
// drain time.
func TestAgentWithoutEnvoyStopsAtOnce(t *testing.T) {
	cfg := testConfig()
	cfg.Dataplane.DrainTime = Duration(time.Minute)
	h := startAgent(t, cfg, cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"})
	h.waitReady()
	h.cancel()
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an agent without Envoy waited for its one-minute drain time")
	}
	if !strings.Contains(h.logs.String(), "nothing to drain") {
		t.Fatal("the log does not say why it stopped at once")
	}
}

func TestAgentAbortCutsTheDrainShort(t *testing.T) {
	cfg := testConfig()
	cfg.Dataplane.DrainTime = Duration(time.Minute)
	h := startAgent(t, cfg, cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"}, func(p *Parts) { p.Envoy = &memEnvoy{} })
	h.waitReady()
	start := time.Now()
	h.cancel()
	eventually(t, "draining", func() bool { code, _ := h.get("/ready"); return code == 503 })
	h.a.Abort()
	select {
	case err := <-h.done:
		h.done <- err
		if err != nil || time.Since(start) > 2*time.Second {
			t.Fatalf("Run returned %v after %v", err, time.Since(start))
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Abort did not stop the drain")
	}
}

// recordingProxy notes when it was installed and removed, relative to the resolver.
type recordingProxy struct {
	dns                  *memDNS
	installedBeforeDNS   bool
	uninstalledAfterStop bool
	uninstalls           int
}

func (p *recordingProxy) Install(context.Context) error {
	p.installedBeforeDNS = !p.dns.running.Load()
	return nil
}

func (p *recordingProxy) Uninstall(context.Context) error {
	p.uninstalls++
	p.uninstalledAfterStop = !p.dns.running.Load() && p.dns.stopped.Load() != 0
	return nil
}

func TestAgentTransparentProxyLifecycle(t *testing.T) {
	for _, uninstall := range []bool{false, true} {
		t.Run(fmt.Sprintf("uninstall=%v", uninstall), func(t *testing.T) {
			cfg := testConfig()
			cfg.Admin.Address = "127.0.0.1:0"
			cfg.TransparentProxy = TransparentProxyConfig{Enabled: true, UninstallOnExit: uninstall}
			dns := newMemDNS()
			tp := &recordingProxy{dns: dns}
			src := &memSource{first: cplink.Update{Snapshot: snapshot(t, "httpbin")}, updates: make(chan cplink.Update)}
			a, _ := New(cfg, Parts{Source: src, Allocator: serviceAllocator{}, DNS: dns, TransparentProxy: tp}, nil, time.Time{})
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			eventually(t, "ready", func() bool { return a.ready.Load() })
			cancel()
			a.Abort()
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if !tp.installedBeforeDNS {
				t.Error("installed after the resolver started")
			}
			want := 0
			if uninstall {
				want = 1
			}
			if tp.uninstalls != want || (uninstall && !tp.uninstalledAfterStop) {
				t.Errorf("uninstalls %d (after stop %v), want %d after the resolver stopped", tp.uninstalls, tp.uninstalledAfterStop, want)
			}
		})
	}
}

func TestAgentReadinessEndpoint(t *testing.T) {
	cfg := testConfig()
	cfg.Admin.ReadinessAddress = "127.0.0.1:0"
	h := startAgent(t, cfg, cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"})
	h.waitReady()
	base := "http://" + h.a.readyAddr.Load().String()
	for path, want := range map[string]int{"/ready": 200, "/vips": 404, "/config_dump": 404, "/metrics": 404} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("readiness endpoint %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func TestPoolSizes(t *testing.T) {
	got := poolSizes(vipalloc.DefaultConfig())
	// 240.0.0.0/4 without 242.0.0.0/8, and 242.0.0.0/8.
	if got["service"] != float64(1<<28-1<<24) || got["external"] != float64(1<<24) {
		t.Fatalf("pool sizes %v", got)
	}
}

func TestConfigDumpRedactsPrivateKeys(t *testing.T) {
	snap := snapshot(t, "httpbin")
	mes := &mesh.MeshExternalService{Meta: mesh.Meta{Name: "ext"}, Spec: mesh.MeshExternalServiceSpec{
		TLS: &mesh.MESTLS{Verification: &mesh.MESVerification{
			ClientKey:  &mesh.DataSource{InlineString: "-----BEGIN PRIVATE KEY-----"},
			ClientCert: &mesh.DataSource{InlineString: "-----BEGIN CERTIFICATE-----"},
			CACert:     &mesh.DataSource{Secret: "ca"},
		}},
	}}
	snap.MeshExternalServices = append(snap.MeshExternalServices, mes)
	envoyish := map[string]any{"transportSocket": map[string]any{"tlsCertificates": []any{
		map[string]any{"privateKey": map[string]any{"inlineBytes": "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t"}}}}}
	v, err := redacted(map[string]any{"model": snap, "envoy": envoyish})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	if strings.Contains(string(b), "PRIVATE KEY") || strings.Contains(string(b), "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t") || strings.Count(string(b), "[redacted]") != 2 ||
		!strings.Contains(string(b), "BEGIN CERTIFICATE") || !strings.Contains(string(b), `"secret":"ca"`) {
		t.Fatalf("redaction: %s", b)
	}
}

// A model served without a file's newest content (the directory source's refused files):
// applied, the files named once while they stay refused (polls bring the same update
// again), counted in /metrics, and the return to all files accepted said once.
func TestAgentRefusedFilesLoggedOnce(t *testing.T) {
	h := startAgent(t, testConfig(), cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"})
	h.waitReady()
	refused := []cplink.RefusedFile{{Path: "policies/vo.yaml", Kept: true, Err: mesh.Errors{{Source: "policies/vo.yaml#1",
		Kind: mesh.KindVirtualOutbound, Name: "by-version", Path: "conf.host", Value: "{{nope}}", Msg: "template: bad"}}}}
	for range 3 {
		h.send(cplink.Update{Snapshot: snapshot(t, "httpbin", "backend"), Trigger: "poll", Refused: refused})
	}
	eventually(t, "backend.mesh served beside the refused file", func() bool { _, ok := h.dns.lookup("backend.mesh"); return ok })
	eventually(t, "three updates taken", func() bool {
		_, m := h.get("/metrics")
		return strings.Contains(m, `kuma_dp_model_reloads_total{result="unchanged"} 2`)
	})
	if n := strings.Count(h.logs.String(), "file refused; its last good version keeps serving"); n != 1 {
		t.Errorf("the refused file logged %d times, want once:\n%s", n, h.logs)
	}
	if line := lineOf(h.logs.String(), "file refused"); !strings.Contains(line, "field=conf.host") || !strings.Contains(line, "policies/vo.yaml#1") {
		t.Errorf("the line does not name the file and field: %s", line)
	}
	if _, m := h.get("/metrics"); !strings.Contains(m, "kuma_dp_model_files_refused 1") {
		t.Error("/metrics does not count the refused file")
	}
	h.send(cplink.Update{Snapshot: snapshot(t, "httpbin", "backend"), Trigger: "poll"})
	eventually(t, "every file accepted again", func() bool { return strings.Contains(h.logs.String(), "every file accepted again") })
	if _, m := h.get("/metrics"); !strings.Contains(m, "kuma_dp_model_files_refused 0") {
		t.Error("/metrics still counts a refused file")
	}
}

func lineOf(logs, s string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// A second file refused beside one already logged is logged alone: the first, unchanged,
// is not named again; a file accepted again while another stays refused is said, and its
// refusal, should it come back, is logged again.
func TestAgentRefusedFilesLoggedOncePerFile(t *testing.T) {
	h := startAgent(t, testConfig(), cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"})
	h.waitReady()
	errOf := func(path string) error {
		return mesh.Errors{{Source: path + "#1", Kind: mesh.KindVirtualOutbound, Name: "vo", Path: "conf.host", Value: "{{nope}}", Msg: "template: bad"}}
	}
	a := cplink.RefusedFile{Path: "policies/a.yaml", Kept: true, Err: errOf("policies/a.yaml")}
	b := cplink.RefusedFile{Path: "policies/b.yaml", Kept: true, Err: errOf("policies/b.yaml")}
	send := func(n int, rf ...cplink.RefusedFile) {
		h.send(cplink.Update{Snapshot: snapshot(t, "httpbin", fmt.Sprintf("svc%d", n)), Trigger: "poll", Refused: rf})
		eventually(t, fmt.Sprintf("update %d applied", n), func() bool { _, ok := h.dns.lookup(fmt.Sprintf("svc%d.mesh", n)); return ok })
	}
	send(1, a)
	send(2, a, b)
	send(3, b)
	send(4, a, b)
	logs := h.logs.String()
	if n := strings.Count(logs, "file=policies/a.yaml#1"); n != 2 {
		t.Errorf("a.yaml named %d times, want 2 (refused, accepted, refused again):\n%s", n, logs)
	}
	if n := strings.Count(logs, "file=policies/b.yaml#1"); n != 1 {
		t.Errorf("b.yaml named %d times, want once:\n%s", n, logs)
	}
	if !strings.HasSuffix(lineOf(logs, "file no longer refused"), "file=policies/a.yaml") {
		t.Errorf("a.yaml accepted again not said:\n%s", logs)
	}
	if _, m := h.get("/metrics"); !strings.Contains(m, "kuma_dp_model_files_refused 2") {
		t.Error("/metrics does not count both files")
	}
}

// A refused file whose last good version was kept for another list of reachable services
// is logged so: the dataplanes of the services reachable since are missing from it.
func TestAgentRefusedFileNarrowedSaysSo(t *testing.T) {
	h := startAgent(t, testConfig(), cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"})
	h.waitReady()
	f := cplink.RefusedFile{Path: "policies/inv.yaml", Kept: true, Err: errors.New("policies/inv.yaml#1: bad")}
	h.send(cplink.Update{Snapshot: snapshot(t, "httpbin", "a"), Trigger: "poll", Refused: []cplink.RefusedFile{f}})
	f.Narrowed = true
	h.send(cplink.Update{Snapshot: snapshot(t, "httpbin", "a", "b"), Trigger: "poll", Refused: []cplink.RefusedFile{f}})
	eventually(t, "the narrowed version said", func() bool {
		return strings.Contains(h.logs.String(), "without its dataplanes of the services reachable since")
	})
	if n := strings.Count(h.logs.String(), "file refused"); n != 2 {
		t.Errorf("%d refusal lines, want 2 (kept, then kept narrowed):\n%s", n, h.logs)
	}
}

// A model the agent refuses (another dataplane than the one it runs as) is not the model
// served: its refused files are neither logged as served at their last good version nor
// counted, and a file it says accepted again is not taken as such.
func TestAgentRefusedFilesOfARefusedModelNotNoted(t *testing.T) {
	h := startAgent(t, testConfig(), cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"})
	h.waitReady()
	f := cplink.RefusedFile{Path: "policies/vo.yaml", Kept: true, Err: errors.New("policies/vo.yaml#1: bad")}
	h.send(cplink.Update{Snapshot: snapshot(t, "httpbin", "a"), Trigger: "poll", Refused: []cplink.RefusedFile{f}})
	eventually(t, "the refused file logged", func() bool { return strings.Contains(h.logs.String(), "file refused") })

	other := snapshot(t, "httpbin", "b")
	self := *other.Self
	self.Name = "web-2"
	other, err := mesh.NewSnapshot(&self, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := cplink.RefusedFile{Path: "policies/other.yaml", Kept: true, Err: errors.New("policies/other.yaml#1: bad")}
	h.send(cplink.Update{Snapshot: other, Trigger: "poll", Refused: []cplink.RefusedFile{g}})
	eventually(t, "the other dataplane refused", func() bool {
		_, m := h.get("/metrics")
		return strings.Contains(m, `kuma_dp_model_reloads_total{result="refused"} 1`)
	})
	logs := h.logs.String()
	if strings.Contains(logs, "other.yaml") || strings.Contains(logs, "no longer refused") {
		t.Errorf("the refused model's files were noted as served:\n%s", logs)
	}
	if _, m := h.get("/metrics"); !strings.Contains(m, "kuma_dp_model_files_refused 1") {
		t.Errorf("the count is not the served model's: %s", lineOf(m, "kuma_dp_model_files_refused "))
	}
}

// savingSource is memSource that saves its model, with failures (the link's ModelSaveFailures).
type savingSource struct {
	*memSource
	failures atomic.Uint64
}

func (s *savingSource) ModelSaveFailures() uint64 { return s.failures.Load() }

// The saved model's failed writes are a metric (the link logs them once per episode).
func TestAgentCountsModelSaveFailures(t *testing.T) {
	var src *savingSource
	h := startAgent(t, testConfig(), cplink.Update{Snapshot: snapshot(t, "httpbin"), Trigger: "start"}, func(p *Parts) {
		src = &savingSource{memSource: p.Source.(*memSource)}
		p.Source = src
	})
	h.waitReady()
	if _, m := h.get("/metrics"); !strings.Contains(m, "kuma_dp_model_save_failures_total 0") {
		t.Errorf("no save failure yet: %s", lineOf(m, "kuma_dp_model_save_failures_total "))
	}
	src.failures.Store(3)
	if _, m := h.get("/metrics"); !strings.Contains(m, "kuma_dp_model_save_failures_total 3") {
		t.Errorf("three failures: %s", lineOf(m, "kuma_dp_model_save_failures_total "))
	}
}
