package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

// TestRealPartsWithEnvoy composes every part, Envoy included, in this process: Envoy is
// cmd/kuma-dp/testdata/fakeenvoy (it reads the bootstrap, serves the admin API on its socket
// and consumes delta ADS). Readiness waits for Envoy's own /ready; /config_dump shows the
// resources; on shutdown Envoy is drained and stopped, and goleak (TestMain) finds no
// goroutine of the xDS server, the supervisor or the probe left.
func TestRealPartsWithEnvoy(t *testing.T) {
	a, report, cancel, done := runWithFakeEnvoy(t)

	_, _, envoy, _ := a.model.get()
	raw, err := json.Marshal(envoy)
	if err != nil {
		t.Fatal(err)
	}
	var dump struct {
		Listeners []json.RawMessage `json:"listeners"`
		Clusters  []json.RawMessage `json:"clusters"`
		Secrets   []string          `json:"secrets"`
	}
	if err := json.Unmarshal(raw, &dump); err != nil || len(dump.Listeners) < 4 || len(dump.Clusters) < 3 {
		t.Fatalf("envoy dump: %v\n%.1500s", err, raw)
	}
	eventually(t, "Envoy receiving its listeners", func() bool {
		b, _ := os.ReadFile(report)
		return containsEvent(b, "update")
	})

	start := time.Now()
	cancel()
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("stopped after %v, before the drain time", took)
	}
	b, _ := os.ReadFile(report)
	if !containsEvent(b, "healthcheck-fail") || !containsEvent(b, "stop") {
		t.Errorf("Envoy was not drained and stopped:\n%s", b)
	}
}

// runWithFakeEnvoy runs the agent with its real parts and the fake Envoy on a mesh of three
// services, with the transparent proxy's listeners, until it is ready with Envoy live. It
// returns the agent, the fake Envoy's report file, what stops the agent and where Run's
// result arrives (put back once read: the test's cleanup reads it too).
func runWithFakeEnvoy(t *testing.T) (a *Agent, report string, cancel func(), done chan error) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "envoy")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/kuma-dp/testdata/fakeenvoy").CombinedOutput(); err != nil {
		t.Fatalf("building the fake envoy: %v\n%s", err, out)
	}
	root := t.TempDir()
	writeMesh(t, root, 3)
	tp := "  transparentProxying:\n    redirectPortInbound: 15006\n    redirectPortOutbound: 15001\n"
	if err := os.WriteFile(filepath.Join(root, "dataplane.yaml"), []byte(testutil.DataplaneWeb+tp), 0o644); err != nil {
		t.Fatal(err)
	}
	report = filepath.Join(root, "report.jsonl")
	t.Setenv("FAKE_ENVOY_REPORT", report)
	cfg := realConfig(t, root)
	cfg.Runtime.Envoy, cfg.Runtime.BinaryPath = true, bin
	cfg.Dataplane.DrainTime = Duration(300 * time.Millisecond)
	logs := &testutil.LockedBuffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	parts, cleanup, err := Build(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(false) })
	if parts.Envoy == nil {
		t.Fatalf("no Envoy part:\n%s", logs)
	}
	a, _ = New(cfg, parts, log, time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	done = make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		a.Abort()
		<-done
	})
	eventually(t, "ready with Envoy live", func() bool { return a.ready.Load() })
	return a, report, cancel, done
}

// An Envoy that ignores SIGTERM is killed within the time the agent waits for its Envoy
// part to stop: with the supervisor's default grace (10 s) it outlived the agent's 5 s wait
// and ran on until kuma-dp itself exited.
func TestStuckEnvoyKilledAtStop(t *testing.T) {
	t.Setenv("FAKE_ENVOY_IGNORE_TERM", "1")
	_, report, cancel, done := runWithFakeEnvoy(t)
	b, _ := os.ReadFile(report)
	var pid int
	for _, line := range strings.Split(string(b), "\n") {
		var ev struct {
			Event string `json:"event"`
			PID   int    `json:"pid"`
		}
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Event == "start" {
			pid = ev.PID
		}
	}
	if pid == 0 {
		t.Fatalf("no start event with a pid:\n%s", b)
	}
	cancel()
	err := <-done
	done <- err
	if err := syscall.Kill(pid, 0); err == nil {
		t.Fatalf("Envoy (pid %d), ignoring SIGTERM, still runs after the agent stopped", pid)
	}
}

func containsEvent(report []byte, event string) bool {
	return strings.Contains(string(report), `"event":"`+event+`"`)
}

// With the transparent proxy on a host with IPv6, the capture listeners listen on [::]:
// the proxy redirects IPv6 by default and DNS answers each VIP's IPv6 twin, and an IPv4-only
// capture listener refused those connections (an IPv4 dataplane's Envoy had 0.0.0.0).
func TestCaptureListenersTakeIPv6(t *testing.T) {
	if !hostHasIPv6() {
		t.Skip("this host cannot listen on [::]")
	}
	cfg := testConfig()
	cfg.TransparentProxy.Enabled = true
	e, err := newEnvoyPart(cfg, t.TempDir(), "", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, "backend")
	table, err := serviceAllocator{}.Allocate(snap)
	if err != nil {
		t.Fatal(err)
	}
	dump, err := e.Update(snap, table)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, l := range dump.(envoyDump).r.Listeners {
		if l.GetName() == "outbound:passthrough" || l.GetName() == "inbound:passthrough" {
			found++
			if a := l.GetAddress().GetSocketAddress().GetAddress(); a != "::" {
				t.Errorf("%s listens on %q, want ::", l.GetName(), a)
			}
		}
	}
	if found != 2 {
		t.Fatalf("%d capture listeners, want 2", found)
	}
}
