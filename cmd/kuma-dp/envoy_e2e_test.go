package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/internal/testutil"
)

var (
	fakeOnce sync.Once
	fakePath string
	fakeErr  error
)

// fakeEnvoy builds testdata/fakeenvoy: an `envoy` that reads the bootstrap, serves the admin
// API and consumes delta ADS for real (no Envoy binary exists on these machines).
func fakeEnvoy(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		dir := filepath.Dir(kumaDP(t)) // removed with it in TestMain
		fakePath = filepath.Join(dir, "envoy")
		out, err := exec.Command("go", "build", "-o", fakePath, "./testdata/fakeenvoy").CombinedOutput()
		if err != nil {
			fakeErr = fmt.Errorf("go build fakeenvoy: %v\n%s", err, out)
		}
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return fakePath
}

type envoyEvent struct {
	Event   string   `json:"event"`
	Type    string   `json:"type"`
	Names   []string `json:"names"`
	Removed []string `json:"removed"`
	Args    []string `json:"args"`
	PID     int      `json:"pid"`
}

func readReport(t *testing.T, path string) []envoyEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []envoyEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var e envoyEvent
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	return out
}

// listenersSeen is every listener name Envoy was sent, minus those removed since.
func listenersSeen(events []envoyEvent) []string {
	set := map[string]bool{}
	for _, e := range events {
		if e.Event != "update" || !strings.HasSuffix(e.Type, "Listener") {
			continue
		}
		for _, n := range e.Names {
			set[n] = true
		}
		for _, n := range e.Removed {
			delete(set, n)
		}
	}
	var out []string
	for n := range set {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func TestE2EWithEnvoy(t *testing.T) {
	t.Parallel()
	dpFile, policies := meshDir(t)
	// With the transparent proxy, every VIP:port gets its listener (bound by redirection).
	writeFile(t, dpFile, testutil.DataplaneWeb+"  transparentProxying:\n    redirectPortInbound: 15006\n    redirectPortOutbound: 15001\n")
	report := filepath.Join(t.TempDir(), "envoy-report.jsonl")
	p := startAgentEnv(t, []string{"FAKE_ENVOY_REPORT=" + report}, dpFile, policies,
		"--envoy=true", "--binary-path", fakeEnvoy(t), "--drain-time", "1s")

	// Ready means Envoy runs; its configuration arrives over ADS from the agent.
	waitFor(t, "Envoy receiving listeners", 5*time.Second, func() bool { return len(listenersSeen(readReport(t, report))) > 0 })
	events := readReport(t, report)
	if events[0].Event != "start" || !slices.Contains(events[0].Args, "--drain-time-s") {
		t.Fatalf("envoy start: %+v", events[0])
	}
	code, body := p.get("/config_dump")
	var dump struct {
		Envoy struct {
			Listeners []struct {
				Name string `json:"name"`
			} `json:"listeners"`
			Clusters []json.RawMessage `json:"clusters"`
		} `json:"envoy"`
	}
	if err := json.Unmarshal([]byte(body), &dump); code != 200 || err != nil || len(dump.Envoy.Listeners) == 0 || len(dump.Envoy.Clusters) == 0 {
		t.Fatalf("/config_dump envoy section: %d %v\n%.2000s", code, err, body)
	}
	var dumped []string
	for _, l := range dump.Envoy.Listeners {
		dumped = append(dumped, l.Name)
	}
	slices.Sort(dumped)
	waitFor(t, "Envoy holding what /config_dump shows", 5*time.Second, func() bool {
		return slices.Equal(listenersSeen(readReport(t, report)), dumped)
	})

	// A policy change reaches Envoy as a delta: new listeners, old ones removed.
	before := len(readReport(t, report))
	writeFile(t, filepath.Join(policies, "virtual-outbound.yaml"), testutil.VirtualOutbound("default", "{{service}}-{{version}}.mesh"))
	waitFor(t, "a listener delta after the edit", 5*time.Second, func() bool {
		for _, e := range readReport(t, report)[before:] {
			if e.Event == "update" && strings.HasSuffix(e.Type, "Listener") {
				return true
			}
		}
		return false
	})

	// SIGTERM: readiness 503, Envoy told to fail its health checks, then stopped; exit 0.
	if err := p.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "/ready 503", 2*time.Second, func() bool { code, _ := p.get("/ready"); return code == 503 })
	select {
	case <-p.Exited():
	case <-time.After(4 * time.Second):
		t.Fatal("did not exit within the drain time (+3s)")
	}
	if p.Err() != nil {
		t.Fatalf("exit: %v", p.Err())
	}
	var order []string
	for _, e := range readReport(t, report) {
		if e.Event == "healthcheck-fail" || e.Event == "stop" {
			order = append(order, e.Event)
		}
	}
	if !slices.Equal(order, []string{"healthcheck-fail", "stop"}) {
		t.Fatalf("envoy saw %v, want healthcheck-fail then stop", order)
	}
	// Envoy is gone too.
	if pid := events[0].PID; pid == 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
		t.Errorf("envoy (pid %d) still running after the agent exited", pid)
	}
}
