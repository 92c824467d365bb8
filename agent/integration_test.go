package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// These tests compose the real parts (Build): the directory source, the allocator and the
// CoreDNS resolver, in this process, so that goleak sees every goroutine they start.

func itService(name string, i int) string {
	return fmt.Sprintf(`type: Dataplane
mesh: default
name: %s-%d
networking:
  address: 10.1.%d.%d
  inbound:
    - port: 80
      tags:
        kuma.io/service: %s
---
`, name, i, i/250, i%250+1, name)
}

func realConfig(t testing.TB, root string) Config {
	cfg := Defaults()
	cfg.Runtime.DataplaneFile = filepath.Join(root, "dataplane.yaml")
	cfg.Runtime.PoliciesDir = filepath.Join(root, "policies")
	cfg.Runtime.WorkDir = filepath.Join(root, "work")
	cfg.Runtime.Envoy = false
	cfg.DNS.Addresses = []string{"127.0.0.1"}
	cfg.DNS.ProxyPort = 0
	cfg.DNS.Upstreams = []string{"127.0.0.1:9"}
	cfg.Admin.Address = "127.0.0.1:0"
	cfg.Dataplane.DrainTime = Duration(200 * time.Millisecond)
	return cfg
}

func writeMesh(t testing.TB, root string, services int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(root, "policies"), 0o755); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := 0; i < services; i++ {
		b.WriteString(itService(fmt.Sprintf("svc%d", i), i))
	}
	for path, body := range map[string]string{"dataplane.yaml": testutil.DataplaneWeb, "policies/services.yaml": b.String()} {
		if err := os.WriteFile(filepath.Join(root, path), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func lookupA(t testing.TB, server, name string) (string, int) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := (&dns.Client{Timeout: time.Second}).Exchange(m, server)
	if err != nil {
		t.Fatalf("query %s: %v", name, err)
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String(), r.Rcode
		}
	}
	return "", r.Rcode
}

func TestRealPartsServeReloadAndStopClean(t *testing.T) {
	root := t.TempDir()
	writeMesh(t, root, 3)
	cfg := realConfig(t, root)
	logs := &testutil.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	parts, cleanup, err := Build(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup(false)
	a, err := New(cfg, parts, log, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.RunWithSignals(ctx) }()
	eventually(t, "ready", func() bool { return a.ready.Load() })
	udp, _ := parts.DNS.Addrs()
	server := udp[0].String()

	ip, rcode := lookupA(t, server, "svc1.mesh")
	if rcode != dns.RcodeSuccess || ip == "" {
		t.Fatalf("svc1.mesh: %q rcode %d\n%s", ip, rcode, logs)
	}
	// A new service file reaches DNS through the inotify watch.
	if err := os.WriteFile(filepath.Join(root, "policies", "new.yaml"), []byte(itService("fresh", 200)), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "fresh.mesh", func() bool { ip, _ := lookupA(t, server, "fresh.mesh"); return ip != "" })
	if again, _ := lookupA(t, server, "svc1.mesh"); again != ip {
		t.Errorf("svc1.mesh moved from %s to %s", ip, again)
	}
	// /metrics is one valid exposition with the real resolver's metrics beside the agent's.
	rec := httptest.NewRecorder()
	a.adminMux().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	for _, name := range []string{"kuma_dp_model_reloads_total", "kuma_dp_vip_entries", "kuma_dp_vip_pool_size", "go_goroutines"} {
		if families[name] == nil {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	dnsFamilies := 0
	for name := range families {
		if strings.HasPrefix(name, "kuma_dp_dns_") || strings.HasPrefix(name, "coredns_") {
			dnsFamilies++
		}
	}
	if dnsFamilies == 0 {
		t.Error("/metrics lacks the resolver's metrics")
	}
	// The allocator's state survives in the work dir.
	if _, err := os.Stat(filepath.Join(cfg.Runtime.WorkDir, StateFileName)); err != nil {
		t.Errorf("state file: %v", err)
	}

	// SIGHUP (to ourselves: RunWithSignals has it) forces a load.
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	eventually(t, "SIGHUP reload", func() bool { return strings.Contains(logs.String(), "trigger=reload") })

	// A service added just before the agent stops has its VIP in the state file once it
	// stopped (written off the change's path a second later, or by the stop's Flush).
	if err := os.WriteFile(filepath.Join(root, "policies", "last.yaml"), []byte(itService("last", 201)), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "last.mesh", func() bool { ip, _ := lookupA(t, server, "last.mesh"); return ip != "" })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(cfg.Runtime.WorkDir, StateFileName)); err != nil || !strings.Contains(string(b), `"last.mesh"`) {
			t.Errorf("the state file after the stop lacks last.mesh: %v\n%s", err, b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	// The resolver's sockets are closed.
	if c, err := net.ListenPacket("udp", server); err != nil {
		t.Errorf("DNS port still bound: %v", err)
	} else {
		c.Close()
	}
}

// BenchmarkColdStart measures Build + Run until ready with a 10,000-service mesh: load,
// validate, allocate 10,000 VIPs, start CoreDNS and see it answer.
func BenchmarkColdStart10k(b *testing.B) {
	root := b.TempDir()
	writeMesh(b, root, 10000)
	cfg := realConfig(b, root)
	log := slog.New(slog.DiscardHandler)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		os.RemoveAll(cfg.Runtime.WorkDir) // a cold start: no state file
		start := time.Now()
		parts, cleanup, err := Build(context.Background(), cfg, log)
		if err != nil {
			b.Fatal(err)
		}
		a, _ := New(cfg, parts, log, start)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }()
		for !a.ready.Load() {
			time.Sleep(100 * time.Microsecond)
		}
		b.ReportMetric(float64(time.Since(start).Microseconds())/1000, "ms-to-ready")
		b.StopTimer()
		a.Abort()
		cancel()
		<-done
		cleanup(false)
		b.StartTimer()
	}
}
