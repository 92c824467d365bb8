package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cplink"
)

// BenchmarkFanout: one kuma-cp process (TLS, tokens checked) and `-agents` simulated agents
// in this process, each a real cplink.Client (decode, validate, build the model) on its own
// TLS connection over loopback. Each iteration changes one Dataplane of the inventory in the
// control plane's directory and waits until every agent has the new model. Reported:
//
//	p50-ms, p99-ms          from the file's rename to each agent holding the change
//	                        (received, decoded, validated; ACKed right after)
//	model-p50-ms, -p99-ms   to each agent's new model built (mesh.NewSnapshot over the whole
//	                        inventory): all agents' builds share this machine's cores here,
//	                        where each agent would have its own
//	delta-B/agent           bytes received per agent for one change
//	full-B/agent            bytes of the first (complete) sync per agent: what a full resend costs
//	cp-KiB/agent            the control plane's RSS growth per connected agent
//
// Setup is expensive: run with a fixed count, e.g.
//
//	go test ./cmd/kuma-cp -run '^$' -bench Fanout -benchtime 20x
func BenchmarkFanout(b *testing.B) {
	agents := 1000
	if v := os.Getenv("KUMA_CP_BENCH_AGENTS"); v != "" {
		agents, _ = strconv.Atoi(v)
	}
	e := newBenchEnv(b, agents)
	cpBin, _ := binaries(b)
	ready := filepath.Join(b.TempDir(), "ready.json")
	cp := startBenchProc(b, cpBin, "serve", "--resources-dir", e.resources, "--address", "127.0.0.1:0",
		"--tls-cert-file", e.path(tlsCertFile), "--tls-key-file", e.path(tlsKeyFile), "--token-key-file", e.path(tokenKey),
		"--poll-interval", "10ms", "--ready-file", ready, "--log-level", "warn")
	addr := cp.waitAddress(ready)
	rssBefore := rssKiB(b, cp.pid())

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	clients := make([]*cplink.Client, agents)
	got := make([]chan time.Time, agents)
	delivered := make([]chan time.Time, agents)
	var measuring atomic.Bool
	var loadWG sync.WaitGroup
	sem := make(chan struct{}, 64) // connect 64 at a time
	for i := range agents {
		name := dpName(i)
		delivered[i] = make(chan time.Time, 4)
		onResponse := func(_ string, resources int, _ bool) {
			if resources > 0 && measuring.Load() {
				delivered[i] <- time.Now()
			}
		}
		c, err := cplink.NewClient(cplink.ClientConfig{Address: "grpcs://" + addr, CACertFile: e.path(caCertFile),
			TokenFile: e.tokenFile(name), Name: name, Mesh: "default", OnResponse: onResponse}, nil)
		if err != nil {
			b.Fatal(err)
		}
		clients[i] = c
		got[i] = make(chan time.Time, 4)
		loadWG.Add(1)
		go func() {
			sem <- struct{}{}
			u := c.Load(ctx)
			<-sem
			loadWG.Done()
			if u.Err != nil {
				return
			}
			out := make(chan cplink.Update)
			wg.Add(2)
			go func() { defer wg.Done(); _ = c.Run(ctx, out) }()
			go func() {
				defer wg.Done()
				for {
					select {
					case <-ctx.Done():
						return
					case <-out:
						got[i] <- time.Now()
					}
				}
			}()
		}()
	}
	loadWG.Wait()
	time.Sleep(200 * time.Millisecond) // let the last connections settle before measuring memory
	rssAfter := rssKiB(b, cp.pid())
	var fullBytes int64
	for _, c := range clients {
		fullBytes += c.Stats().BytesReceived.Load()
	}

	var lat, model []time.Duration
	measuring.Store(true)
	b.ResetTimer()
	for n := range b.N {
		start := time.Now()
		e.writeDataplane(0, n+1)
		for i := range agents {
			for _, m := range []struct {
				ch  chan time.Time
				out *[]time.Duration
			}{{delivered[i], &lat}, {got[i], &model}} {
				select {
				case at := <-m.ch:
					*m.out = append(*m.out, at.Sub(start))
				case <-time.After(30 * time.Second):
					b.Fatalf("agent %d did not get change %d", i, n)
				}
			}
		}
	}
	b.StopTimer()
	var allBytes int64
	for _, c := range clients {
		allBytes += c.Stats().BytesReceived.Load()
	}
	q := func(d []time.Duration, p float64) float64 {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return float64(d[int(p*float64(len(d)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(q(lat, 0.50), "p50-ms")
	b.ReportMetric(q(lat, 0.99), "p99-ms")
	b.ReportMetric(q(model, 0.50), "model-p50-ms")
	b.ReportMetric(q(model, 0.99), "model-p99-ms")
	b.ReportMetric(float64(allBytes-fullBytes)/float64(agents)/float64(b.N), "delta-B/agent")
	b.ReportMetric(float64(fullBytes)/float64(agents), "full-B/agent")
	b.ReportMetric(float64(rssAfter-rssBefore)/float64(agents), "cp-KiB/agent")
	b.ReportMetric(float64(agents), "agents")
}

// benchEnv is a control plane's directory with a mesh of n Dataplanes (one file each) and a
// VirtualOutbound.
type benchEnv struct {
	*cpEnv
	tb  testing.TB
	key []byte
}

func dpName(i int) string { return fmt.Sprintf("dp-%04d", i) }

func newBenchEnv(tb testing.TB, n int) *benchEnv {
	dir := tb.TempDir()
	e := &benchEnv{cpEnv: &cpEnv{dir: dir, resources: filepath.Join(dir, "resources")}, tb: tb}
	if err := writeCerts(dir, []string{"127.0.0.1"}); err != nil {
		tb.Fatal(err)
	}
	if err := os.MkdirAll(e.resources, 0o755); err != nil {
		tb.Fatal(err)
	}
	key, err := readKey(e.path(tokenKey))
	if err != nil {
		tb.Fatal(err)
	}
	e.key = key
	for i := range n {
		e.writeDataplane(i, 0)
	}
	if err := writeFileAtomic(filepath.Join(e.resources, "vo.yaml"), virtualOutbound("default", "{{version}}.{{service}}.mesh")); err != nil {
		tb.Fatal(err)
	}
	return e
}

// writeDataplane writes Dataplane i with version tag v<gen>.
func (e *benchEnv) writeDataplane(i, gen int) {
	body := fmt.Sprintf(`type: Dataplane
mesh: default
name: %s
networking:
  address: 10.%d.%d.%d
  inbound:
    - port: 8080
      tags:
        kuma.io/service: svc-%d
        version: v%d
`, dpName(i), i>>16&255, i>>8&255, i&255, i%50, gen)
	if err := writeFileAtomic(filepath.Join(e.resources, dpName(i)+".yaml"), body); err != nil {
		e.tb.Fatal(err)
	}
}

func (e *benchEnv) tokenFile(name string) string {
	f := e.path(name + ".token")
	if err := os.WriteFile(f, []byte(issueToken(e.key, identity{Name: name, Mesh: "default"})), 0o600); err != nil {
		e.tb.Fatal(err)
	}
	return f
}

// benchProc is a process run by a benchmark.
type benchProc struct {
	tb testing.TB
	p  *os.Process
}

func startBenchProc(tb testing.TB, bin string, args ...string) *benchProc {
	p, err := os.StartProcess(bin, append([]string{bin}, args...), &os.ProcAttr{Files: []*os.File{nil, os.Stderr, os.Stderr}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = p.Kill(); _, _ = p.Wait() })
	return &benchProc{tb: tb, p: p}
}

func (b *benchProc) pid() int { return b.p.Pid }

func (b *benchProc) waitAddress(ready string) string {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if data, err := os.ReadFile(ready); err == nil {
			if _, rest, ok := strings.Cut(string(data), `"address":"`); ok {
				addr, _, _ := strings.Cut(rest, `"`)
				return addr
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.tb.Fatal("kuma-cp not ready")
	return ""
}

// rssKiB is a process's resident set (VmRSS) in KiB.
func rssKiB(tb testing.TB, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	tb.Fatal("no VmRSS")
	return 0
}
