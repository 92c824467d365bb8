package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
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

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/cp/certs"
	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/cplink"
)

// BenchmarkFanout: one kuma-cp process (TLS, tokens checked) and `-agents` simulated agents
// in this process, each on its own TLS connection over loopback speaking the link's
// protocol: subscribe to every kind, decode and validate every resource received
// (cplink.DecodeResource, the agent's code), ACK. They build no model: on this 2-core
// machine 1,000 agents' model builds would share two cores, where each real agent has its
// own (BenchmarkAgentModel measures one). Each iteration changes one Dataplane of the
// inventory in the control plane's directory and waits until every agent has received it.
// Reported:
//
//	p50-ms, p99-ms   from the file's rename to each agent holding the change
//	                 (directory poll every 10 ms included)
//	delta-B/agent    bytes received per agent for one change
//	full-B/agent     bytes of the first (complete) sync per agent: what a full resend costs
//	cp-KiB/agent     the control plane's RSS growth per connected agent
//	cp-cpu-ms/change the control plane's CPU time per change (user + system)
//
// Setup is expensive: run with a fixed count, e.g.
//
//	go test ./cmd/kuma-cp -run '^$' -bench 'Fanout$' -benchtime 20x
//
// KUMA_CP_BENCH_BIN runs another kuma-cp build (an older one, for a before/after in one run).
func BenchmarkFanout(b *testing.B) {
	agents := 1000
	if v := os.Getenv("KUMA_CP_BENCH_AGENTS"); v != "" {
		agents, _ = strconv.Atoi(v)
	}
	e := newBenchEnv(b, agents)
	cp := e.startCP(b)
	rssBefore := rssKiB(b, cp.pid())

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	creds, err := clientTLS(e.path(certs.CACertFile))
	if err != nil {
		b.Fatal(err)
	}
	sims := connectSims(ctx, b, agents, func(i int) (string, string, credentials.TransportCredentials) {
		return cp.addr, e.tokenOf(dpName(i)), creds
	})
	time.Sleep(200 * time.Millisecond) // let the last connections settle before measuring memory
	rssAfter := rssKiB(b, cp.pid())
	fullBytes := sentBytes(sims)
	cpuBefore := cpuMs(b, cp.pid())

	var lat []time.Duration
	b.ResetTimer()
	for n := range b.N {
		start := time.Now()
		e.writeDataplane(0, n+1)
		lat = awaitChange(b, sims, n, start, 30*time.Second, lat)
	}
	b.StopTimer()
	cpu := cpuMs(b, cp.pid()) - cpuBefore
	allBytes := sentBytes(sims)
	b.ReportMetric(quantile(lat, 0.50), "p50-ms")
	b.ReportMetric(quantile(lat, 0.99), "p99-ms")
	b.ReportMetric(float64(allBytes-fullBytes)/float64(agents)/float64(b.N), "delta-B/agent")
	b.ReportMetric(float64(fullBytes)/float64(agents), "full-B/agent")
	b.ReportMetric(float64(rssAfter-rssBefore)/float64(agents), "cp-KiB/agent")
	b.ReportMetric(cpu/float64(b.N), "cp-cpu-ms/change")
	b.ReportMetric(float64(agents), "agents")
}

// BenchmarkAgentModel: one real agent link (cplink.Client) in a mesh of 1,000 Dataplanes
// served by kuma-cp; each iteration changes one Dataplane and waits for the agent's new
// model (received, decoded, validated, mesh.NewSnapshot over the whole inventory, ACKed).
//
//	go test ./cmd/kuma-cp -run '^$' -bench AgentModel -benchtime 50x
func BenchmarkAgentModel(b *testing.B) {
	e := newBenchEnv(b, 1000)
	cp := e.startCP(b)
	c, err := cplink.NewClient(cplink.ClientConfig{Address: "grpcs://" + cp.addr, CACertFile: e.path(certs.CACertFile),
		TokenFile: e.token(dpName(1), "default"), Name: dpName(1), Mesh: "default"}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if u := c.Load(ctx); u.Err != nil {
		b.Fatal(u.Err)
	}
	out := make(chan cplink.Update)
	go func() { _ = c.Run(ctx, out) }()
	var lat []time.Duration
	b.ResetTimer()
	for n := range b.N {
		start := time.Now()
		e.writeDataplane(0, n+1)
		select {
		case u := <-out:
			if u.Err != nil {
				b.Fatal(u.Err)
			}
			lat = append(lat, time.Since(start))
		case <-time.After(30 * time.Second):
			b.Fatal("no model")
		}
	}
	b.StopTimer()
	b.ReportMetric(quantile(lat, 0.50), "p50-ms")
	b.ReportMetric(quantile(lat, 0.99), "p99-ms")
}

func quantile(d []time.Duration, p float64) float64 {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[int(p*float64(len(d)-1))]) / float64(time.Millisecond)
}

// simAgent speaks the link's protocol as cplink.Client does, without building a model.
type simAgent struct {
	name, token string
	got         chan time.Time // a change received (after the first sync)
	synced      chan error     // every kind answered once, or why not
	bytes       atomic.Int64
}

func (a *simAgent) run(ctx context.Context, addr string, creds credentials.TransportCredentials) {
	fail := func(err error) {
		select {
		case a.synced <- err:
		default:
		}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		fail(err)
		return
	}
	defer conn.Close()
	sctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+a.token)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
	if err != nil {
		fail(err)
		return
	}
	for i, kind := range cplink.Kinds {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: cplink.TypeURL(kind)}
		if i == 0 {
			req.Node = &core.Node{Id: a.name, Cluster: "default"}
		}
		if err := stream.Send(req); err != nil {
			fail(err)
			return
		}
	}
	answered := map[string]bool{}
	for {
		resp, err := stream.Recv()
		if err != nil {
			fail(err)
			return
		}
		a.bytes.Add(int64(proto.Size(resp)))
		kind := cplink.KindOf(resp.GetTypeUrl())
		for _, r := range resp.GetResources() {
			var env wrapperspb.BytesValue
			if err := proto.Unmarshal(r.GetResource().GetValue(), &env); err != nil {
				fail(err)
				return
			}
			if _, err := cplink.DecodeResource(kind, r.GetName(), env.GetValue()); err != nil {
				fail(err)
				return
			}
		}
		if err := stream.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			fail(err)
			return
		}
		if len(answered) < len(cplink.Kinds) {
			answered[kind] = true
			if len(answered) == len(cplink.Kinds) {
				a.synced <- nil
			}
			continue
		}
		if len(resp.GetResources()) > 0 {
			a.got <- time.Now()
		}
	}
}

func clientTLS(caFile string) (credentials.TransportCredentials, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), nil
}

// benchEnv is a control plane's directory with a mesh of n Dataplanes (one file each) and a
// VirtualOutbound.
type benchEnv struct {
	*cpEnv
	key []byte
}

func dpName(i int) string { return fmt.Sprintf("dp-%04d", i) }

func newBenchEnv(tb testing.TB, n int) *benchEnv {
	e := &benchEnv{cpEnv: newCPEnv(tb)}
	key, err := token.ReadKey(e.path(certs.TokenKeyFile))
	if err != nil {
		tb.Fatal(err)
	}
	e.key = key
	for i := range n {
		e.writeDataplane(i, 0)
	}
	e.write("vo.yaml", virtualOutbound("default", "{{version}}.{{service}}.mesh"))
	return e
}

// writeDataplane writes Dataplane i with version tag v<gen>.
func (e *benchEnv) writeDataplane(i, gen int) {
	e.write(dpName(i)+".yaml", fmt.Sprintf(`type: Dataplane
mesh: default
name: %s
networking:
  address: 10.%d.%d.%d
  inbound:
    - port: 8080
      tags:
        kuma.io/service: svc-%d
        version: v%d
`, dpName(i), i>>16&255, i>>8&255, i&255, i%50, gen))
}

// tokenOf is a token for a Dataplane of mesh default (cpEnv.token writes one to a file).
func (e *benchEnv) tokenOf(name string) string {
	return token.Issue(e.key, token.Identity{Name: name, Mesh: "default"})
}

// startCP runs kuma-cp on the directory (TLS, tokens, 10 ms polls, warnings only).
func (e *benchEnv) startCP(b *testing.B) *benchProc {
	cpBin := os.Getenv("KUMA_CP_BENCH_BIN") // another build (an older one, for a before/after in one run)
	if cpBin == "" {
		cpBin, _ = binaries(b)
	}
	ready := filepath.Join(b.TempDir(), "ready.json")
	cp := startBenchProc(b, cpBin, "serve", "--resources-dir", e.resources, "--address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
		"--tls-cert-file", e.path(certs.TLSCertFile), "--tls-key-file", e.path(certs.TLSKeyFile), "--token-key-file", e.path(certs.TokenKeyFile),
		"--poll-interval", "10ms", "--ready-file", ready, "--log-level", "warn")
	cp.addr = cp.waitAddress(ready)
	return cp
}

// benchProc is a process run by a benchmark.
type benchProc struct {
	tb   testing.TB
	p    *os.Process
	addr string
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

// cpuMs is a process's CPU time so far (user + system), in milliseconds.
func cpuMs(tb testing.TB, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command name (which may hold spaces) start after the last ')'.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) * 1000 / 100 // clock ticks of 1/100 s (USER_HZ on Linux)
}

// sentBytes is what the simulated agents have received so far, in bytes.
func sentBytes(sims []*simAgent) int64 {
	var n int64
	for _, a := range sims {
		n += a.bytes.Load()
	}
	return n
}

// awaitChange waits until every simulated agent got change n (written at start) and
// appends each one's latency to lat.
func awaitChange(b *testing.B, sims []*simAgent, n int, start time.Time, timeout time.Duration, lat []time.Duration) []time.Duration {
	for i, a := range sims {
		select {
		case at := <-a.got:
			lat = append(lat, at.Sub(start))
		case <-time.After(timeout):
			b.Fatalf("agent %d did not get change %d", i, n)
		}
	}
	return lat
}

// connectSims connects n simulated agents, 64 at a time, each to the address, with the
// token and credentials dial(i) gives, and returns once every one has its first sync.
func connectSims(ctx context.Context, b *testing.B, n int, dial func(i int) (addr, token string, creds credentials.TransportCredentials)) []*simAgent {
	sims := make([]*simAgent, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		addr, token, creds := dial(i)
		sims[i] = &simAgent{name: dpName(i), token: token, got: make(chan time.Time, 4), synced: make(chan error, 1)}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			go sims[i].run(ctx, addr, creds)
			if err := <-sims[i].synced; err != nil {
				b.Errorf("agent %d: %v", i, err)
			}
			<-sem
		}()
	}
	wg.Wait()
	if b.Failed() {
		b.FailNow()
	}
	return sims
}
