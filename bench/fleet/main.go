// Command fleet measures the fleet reconnect storm: every agent of a mesh connecting to the
// control plane at once (a control plane restarted, a rolling upgrade) and each needing the
// whole mesh, since every agent computes its own names.
//
//	go run ./bench/fleet [--agents 1000,10000] [--dataplanes 1000,10000] [--replicas 1,3] [--gzip=false]
//	  [--cp-flags=--agent-keepalive=30s] [--baseline OLD-KUMA-CP]
//	go run ./bench/fleet --idle 0,1000,10000 [--idle-dataplanes 10] [--profiles DIR] [--baseline OLD-KUMA-CP]
//
// With --idle it measures instead what a connected, synced and silent agent costs kuma-cp
// (idle.go): resident memory, heap, goroutine stacks and goroutines per agent, and the CPU
// the idle agents cost.
//
// For each combination it starts the real kuma-cp binary (`serve` on a directory of
// generated Dataplanes, plain text, no tokens; --replicas of them on the same directory)
// pinned to CPU 0, waits until each is ready, then starts the simulated agents in a second
// process pinned to CPU 1, so that the control plane's cost and the agents' are apart. The
// agents speak the link's real protocol (incremental ADS, every kind the link carries and
// the control plane serves, an ACK per response, and like kuma-dp they list the compressed
// first syncs among their client features unless --gzip=false) but decode (or decompress)
// nothing: they count bytes. An agent is synced when every kind
// it subscribed to has answered once (the first answer of a kind holds the whole kind).
//
// The agents reconnect as the link's client does after losing its control plane: each waits
// its first backoff with jitter (125-250 ms) before it dials, and backs off again after a
// failure. It reports: the time from the storm's start until every agent is synced, the p10,
// p50 and p99 of each agent's time to synced and the p50 of its time to its first response
// (its wait in the control plane's queue of first syncs, mostly), the retries, the control plane's CPU seconds (user+system,
// all replicas) during the storm, its peak RSS (VmHWM, the largest replica) and the bytes
// the agents received, the replicas' resident memory per connected agent (every agent
// synced and connected, over the idle replicas), and the simulated agents' own CPU seconds (when they approach the
// storm's duration, the simulator on its one core, not kuma-cp, is what limits the figure).
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/spf13/pflag"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	protoenc "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/kumadp/kuma-dp/bench/internal/procstat"
	"github.com/kumadp/kuma-dp/cp/certs"
	"github.com/kumadp/kuma-dp/cplink"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "agents" {
		os.Exit(agentsMain(os.Args[2:]))
	}
	agents := pflag.String("agents", "1000,10000", "agents connecting at once, comma-separated sizes")
	dataplanes := pflag.String("dataplanes", "1000,10000", "dataplanes in the mesh, comma-separated sizes")
	replicas := pflag.String("replicas", "1,3", "control-plane replicas, comma-separated")
	kumaCP := pflag.String("kuma-cp", "", "the kuma-cp binary (default: built from this tree)")
	baseline := pflag.String("baseline", "", "another kuma-cp binary (an earlier build) measured beside it in the same run")
	var opt options
	pflag.DurationVar(&opt.timeout, "timeout", 10*time.Minute, "give up a combination after this long")
	pflag.BoolVar(&opt.gzip, "gzip", true, "the agents take compressed first syncs (kuma-dp's client feature); false: as an earlier kuma-dp")
	pflag.StringSliceVar(&opt.cpFlags, "cp-flags", nil, "more flags for each `kuma-cp serve`, comma-separated (--cp-flags=--agent-keepalive=30s)")
	pflag.BoolVar(&opt.tls, "tls", false, "the link over TLS, as deployed (kuma-cp --tls-cert-file; the agents trust its CA)")
	idleSizes := pflag.String("idle", "", "instead of the storm: the cost of idle connected agents, at these sizes (0,1000,10000; idle.go)")
	idleDataplanes := pflag.Int("idle-dataplanes", 10, "the mesh's dataplanes for --idle")
	pflag.StringVar(&opt.profiles, "profiles", "", "with --idle: write kuma-cp's goroutine and heap profiles, agents connected, into this directory")
	pflag.Parse()
	if err := run(*agents, *dataplanes, *replicas, *kumaCP, *baseline, *idleSizes, *idleDataplanes, opt); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// options are the storm's settings beside its sizes and builds.
type options struct {
	timeout  time.Duration
	gzip     bool     // the agents list the compressed first syncs
	cpFlags  []string // more flags for kuma-cp serve
	profiles string   // --idle: where kuma-cp's profiles go
	tls      bool     // the link over TLS
	caFile   string   // with tls: the CA the agents trust (written by run)
}

// agentsArgs are the agents process's flags for the link's security.
func (o options) agentsArgs() []string {
	if o.caFile == "" {
		return nil
	}
	return []string{"--ca", o.caFile}
}

// build is a kuma-cp binary measured, by name.
type build struct{ name, bin string }

// buildsOf are the builds measured: this one, and the baseline when given.
func buildsOf(kumaCP, baseline string) []build {
	builds := []build{{"this", kumaCP}}
	if baseline != "" {
		builds = append(builds, build{"baseline", baseline})
	}
	return builds
}

// agentsCmd is the agents process (this program's agents command, pinned to CPU 1) with n
// agents on the kuma-cp addresses (comma-separated).
func agentsCmd(self string, n int, addresses string, opt options) *exec.Cmd {
	return exec.Command("taskset", append([]string{"-c", "1", self, "agents", "--agents", strconv.Itoa(n),
		"--addresses", addresses, "--timeout", opt.timeout.String(), "--gzip=" + strconv.FormatBool(opt.gzip)}, opt.agentsArgs()...)...)
}

func run(agentSizes, dpSizes, replicaSizes, kumaCP, baseline, idleSizes string, idleDataplanes int, opt options) error {
	var is []int
	if idleSizes != "" {
		var err error
		if is, err = sizesFrom("--idle", idleSizes, 0); err != nil {
			return err
		}
	}
	as, err := sizes("--agents", agentSizes)
	if err != nil {
		return err
	}
	ds, err := sizes("--dataplanes", dpSizes)
	if err != nil {
		return err
	}
	rs, err := sizes("--replicas", replicaSizes)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "fleet-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if kumaCP, err = procstat.KumaCP(kumaCP, tmp); err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	raiseOpenFiles()
	if opt.tls {
		dir := filepath.Join(tmp, "certs")
		if err := certs.Write(dir, []string{"127.0.0.1"}); err != nil {
			return err
		}
		opt.caFile = filepath.Join(dir, certs.CACertFile)
		opt.cpFlags = append(opt.cpFlags, "--tls-cert-file", filepath.Join(dir, certs.TLSCertFile), "--tls-key-file", filepath.Join(dir, certs.TLSKeyFile))
	}
	if is != nil {
		return runIdle(is, idleDataplanes, kumaCP, baseline, self, tmp, opt)
	}
	fmt.Printf("fleet reconnect storm, kuma-cp pinned to CPU 0, agents to CPU 1, agents take compressed first syncs: %v, TLS: %v, kuma-cp serve %s, load %s\n", opt.gzip, opt.tls, strings.Join(opt.cpFlags, " "), procstat.LoadAvg())
	builds := buildsOf(kumaCP, baseline)
	fmt.Printf("%-9s %-7s %-11s %-9s %10s %10s %10s %10s %10s %9s %12s %12s %14s %8s %9s  %s\n", "BUILD",
		"AGENTS", "DATAPLANES", "REPLICAS", "ALL-SYNCED", "P10", "P50", "P99", "FIRST-P50", "CP-CPU-S", "CP-PEAK-MIB", "BYTES", "AGENTS-CPU-S", "RETRIES", "KIB/AGENT", "LOAD-AFTER")
	for _, d := range ds {
		dir := filepath.Join(tmp, fmt.Sprintf("mesh-%d", d))
		if err := writeMesh(dir, d); err != nil {
			return err
		}
		for _, r := range rs {
			for _, a := range as {
				for _, b := range builds {
					res, err := storm(b.bin, self, dir, tmp, a, r, opt)
					if err != nil {
						return fmt.Errorf("%s: %d agents, %d dataplanes, %d replicas: %w", b.name, a, d, r, err)
					}
					fmt.Printf("%-9s %-7d %-11d %-9d %10s %10s %10s %10s %10s %9.2f %12.1f %12d %14.2f %8d %9.1f  %s\n", b.name, a, d, r,
						res.all.Round(time.Millisecond), res.p10.Round(time.Millisecond), res.p50.Round(time.Millisecond), res.p99.Round(time.Millisecond), res.first50.Round(time.Millisecond),
						res.cpu.Seconds(), float64(res.peak)/(1<<20), res.bytes, res.agentsCPU.Seconds(), res.retries, float64(res.perAgent)/1024, procstat.LoadAvg())
				}
			}
		}
	}
	return nil
}

func sizes(flag, s string) ([]int, error) { return sizesFrom(flag, s, 1) }

func sizesFrom(flag, s string, least int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < least {
			return nil, fmt.Errorf("%s: %q is not a number of at least %d", flag, f, least)
		}
		out = append(out, n)
	}
	return out, nil
}

// writeMesh writes n one-inbound Dataplanes of mesh default, 1,000 to a file.
func writeMesh(dir string, n int) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for file := 0; file*1000 < n; file++ {
		var b strings.Builder
		for i := file * 1000; i < n && i < (file+1)*1000; i++ {
			fmt.Fprintf(&b, "---\ntype: Dataplane\nmesh: default\nname: dp-%d\nnetworking:\n  address: 10.%d.%d.%d\n"+
				"  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: svc-%d\n      kuma.io/zone: zone-%d\n      version: v1\n",
				i, i>>16&255, i>>8&255, i&255, i, i%3)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("dataplanes-%03d.yaml", file)), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}

type result struct {
	all, p10, p50, p99 time.Duration
	first50            time.Duration // an agent's time to its first response (p50)
	cpu                time.Duration
	agentsCPU          time.Duration // the simulated agents' process, on the other core
	retries            int64
	peak               int64
	bytes              int64
	perAgent           int64 // resident bytes per connected agent, once synced, over the idle replicas
}

// replica is one kuma-cp process.
type replica struct {
	cmd             *exec.Cmd
	address, health string
}

func startReplica(kumaCP, dir, tmp string, i int, cpFlags []string) (*replica, error) {
	ready := filepath.Join(tmp, fmt.Sprintf("ready-%d.json", i))
	_ = os.Remove(ready)
	args := append([]string{"-c", "0", kumaCP, "serve", "--resources-dir", dir,
		"--address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--ready-file", ready,
		"--max-connections", "30000", "--max-connections-per-ip", "0", "--max-connection-age", "0",
		"--replica-id", fmt.Sprintf("bench-%d", i), "--log-level", "warn"}, cpFlags...)
	cmd := exec.Command("taskset", args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start kuma-cp (taskset from util-linux is needed): %w", err)
	}
	r := &replica{cmd: cmd}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var info struct{ Address, Metrics string }
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &info) == nil && info.Address != "" {
			r.address, r.health = info.Address, info.Metrics
			if resp, err := http.Get("http://" + r.health + "/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return r, nil
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	return nil, fmt.Errorf("kuma-cp %d not ready after 2 minutes", i)
}

func (r *replica) stop() {
	_ = r.cmd.Process.Signal(unix.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
}

func storm(kumaCP, self, dir, tmp string, agents, replicas int, opt options) (result, error) {
	var rs []*replica
	defer func() {
		for _, r := range rs {
			r.stop()
		}
	}()
	var addrs []string
	for i := range replicas {
		r, err := startReplica(kumaCP, dir, tmp, i, opt.cpFlags)
		if err != nil {
			return result{}, err
		}
		rs = append(rs, r)
		addrs = append(addrs, r.address)
	}
	var cpu0 time.Duration
	for _, r := range rs {
		cpu0 += procstat.CPUTime(r.cmd.Process.Pid)
	}
	var idle int64 // the replicas' resident memory before the storm, after the start
	for _, r := range rs {
		idle += procstat.ReadMemory(r.cmd.Process.Pid).RSS
	}
	cmd := agentsCmd(self, agents, strings.Join(addrs, ","), opt)
	cmd.Stderr = os.Stderr
	hold, err := cmd.StdinPipe() // the agents stay connected until it is closed
	if err != nil {
		return result{}, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return result{}, err
	}
	if err := cmd.Start(); err != nil {
		return result{}, err
	}
	line, readErr := bufio.NewReader(stdout).ReadBytes('\n')
	var connected int64 // with every agent connected and synced
	for _, r := range rs {
		connected += procstat.ReadMemory(r.cmd.Process.Pid).RSS
	}
	hold.Close()
	if err := cmd.Wait(); err != nil || readErr != nil {
		return result{}, fmt.Errorf("agents: %v %v", err, readErr)
	}
	var rep agentsReport
	if err := json.Unmarshal(line, &rep); err != nil {
		return result{}, fmt.Errorf("agents' report %q: %w", line, err)
	}
	res := result{all: rep.All, p10: rep.P10, p50: rep.P50, p99: rep.P99, first50: rep.First50, bytes: rep.Bytes, retries: rep.Retries,
		perAgent:  (connected - idle) / int64(agents),
		agentsCPU: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()}
	for _, r := range rs {
		res.cpu += procstat.CPUTime(r.cmd.Process.Pid)
		res.peak = max(res.peak, procstat.ReadMemory(r.cmd.Process.Pid).Peak)
	}
	res.cpu -= cpu0
	return res, nil
}

func raiseOpenFiles() {
	var l unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = unix.Setrlimit(unix.RLIMIT_NOFILE, &l)
	}
}

// linkCreds secure the agents' link: plain text, or TLS with --ca.
var linkCreds = insecure.NewCredentials()

// agentsReport is what the agents process prints.
type agentsReport struct {
	All, P10, P50, P99 time.Duration
	First50            time.Duration
	Bytes              int64
	Retries            int64
}

// The agents' link reconnects as cplink's client does: a stream lost, it waits
// [backoff/2, backoff] (250 ms at first, doubled at each failure up to 30 s) and dials again.
const (
	firstBackoff = 250 * time.Millisecond
	maxBackoff   = 30 * time.Second
)

func jittered(d time.Duration) time.Duration { return d/2 + rand.N(d/2+1) }

// retryCauses counts the agents' retries by cause (a gRPC code and the error's text
// without addresses and numbers), so that a storm's retries say why.
var retryCauses sync.Map // string -> *atomic.Int64

func retryCause(err error) {
	key := status.Code(err).String() + ": " + strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' {
			return -1
		}
		return r
	}, status.Convert(err).Message())
	n, _ := retryCauses.LoadOrStore(key, new(atomic.Int64))
	n.(*atomic.Int64).Add(1)
}

// logRetryCauses writes the retries' causes to standard error, the most frequent first.
func logRetryCauses() {
	type cause struct {
		n   int64
		why string
	}
	var cs []cause
	retryCauses.Range(func(k, v any) bool {
		cs = append(cs, cause{v.(*atomic.Int64).Load(), k.(string)})
		return true
	})
	slices.SortFunc(cs, func(a, b cause) int { return int(b.n - a.n) })
	for _, c := range cs {
		fmt.Fprintf(os.Stderr, "fleet agents: %d retries after: %s\n", c.n, c.why)
	}
}

// agentWithRetries is one agent after its control plane went away: it waits its first
// backoff, connects, and tries again after each failure until it is synced.
func agentWithRetries(ctx context.Context, address string, node *core.Node, kinds []string, bytes, retries *atomic.Int64, got, synced func(), hold <-chan struct{}) error {
	d := firstBackoff
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(jittered(d)):
		}
		err := agent(ctx, address, node, kinds, bytes, got, synced, hold)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		}
		retries.Add(1)
		retryCause(err)
		d = min(2*d, maxBackoff)
	}
}

func agentsMain(args []string) int {
	fs := pflag.NewFlagSet("agents", pflag.ContinueOnError)
	n := fs.Int("agents", 1000, "agents")
	addresses := fs.String("addresses", "", "the replicas' link addresses, comma-separated (agents spread over them)")
	timeout := fs.Duration("timeout", 10*time.Minute, "give up after this long")
	gz := fs.Bool("gzip", true, "list the link's compressed first syncs among the node's client features")
	ca := fs.String("ca", "", "the link over TLS, trusting this CA (PEM)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	raiseOpenFiles()
	if *ca != "" {
		c, err := credentials.NewClientTLSFromFile(*ca, "")
		if err != nil {
			fmt.Fprintln(os.Stderr, "--ca:", err)
			return 2
		}
		linkCreds = c
	}
	addrs := strings.Split(*addresses, ",")
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	kinds, err := servedKinds(ctx, addrs[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "probing the kinds served:", err)
		return 1
	}
	var bytes atomic.Int64
	took := make([]time.Duration, *n)
	first := make([]time.Duration, *n) // to the first response
	errs := make(chan error, *n)
	var wg sync.WaitGroup
	start := time.Now()
	var retries atomic.Int64
	hold := make(chan struct{}) // closed with standard input: the agents then disconnect
	var gone sync.WaitGroup
	for i := range *n {
		wg.Add(1)
		gone.Add(1)
		go func() {
			defer gone.Done()
			synced := func() { took[i] = time.Since(start); wg.Done() }
			got := func() { first[i] = time.Since(start) }
			node := &core.Node{Id: fmt.Sprintf("dp-%d", i), Cluster: "default"}
			if *gz {
				node.ClientFeatures = []string{cplink.FeatureGzipResources}
			}
			err := agentWithRetries(ctx, addrs[i%len(addrs)], node, kinds, &bytes, &retries, got, synced, hold)
			if err != nil {
				errs <- fmt.Errorf("agent %d: %w", i, err)
				wg.Done()
			}
		}()
	}
	wg.Wait()
	all := time.Since(start)
	logRetryCauses()
	close(errs)
	failed := 0
	for err := range errs {
		if failed == 0 {
			fmt.Fprintln(os.Stderr, err)
		}
		failed++
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "%d of %d agents did not sync\n", failed, *n)
		return 1
	}
	slices.Sort(took)
	slices.Sort(first)
	rep := agentsReport{All: all, P10: took[len(took)/10], P50: took[len(took)/2], P99: took[len(took)*99/100],
		First50: first[len(first)/2], Bytes: bytes.Load(), Retries: retries.Load()}
	b, _ := json.Marshal(rep)
	fmt.Println(string(b))
	_, _ = io.Copy(io.Discard, os.Stdin)
	close(hold)
	gone.Wait()
	return 0
}

// agent connects as one agent would: one stream, a subscription per kind the link carries,
// an ACK per response; once every kind has answered it calls synced and holds the stream
// open, reading nothing more, until hold is closed.
func agent(ctx context.Context, address string, node *core.Node, kinds []string, bytes *atomic.Int64, got, synced func(), hold <-chan struct{}) error {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(linkCreds),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(countingCodec{encoding.GetCodecV2(protoenc.Name)})))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true},
		"/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources")
	if err != nil {
		return err
	}
	for _, k := range kinds {
		if err := s.SendMsg(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: cplink.TypeURL(k)}); err != nil {
			return err
		}
		node = nil
	}
	waiting := map[string]bool{}
	for _, k := range kinds {
		waiting[cplink.TypeURL(k)] = true
	}
	for len(waiting) > 0 {
		var r counted
		if err := s.RecvMsg(&r); err != nil {
			return err
		}
		bytes.Add(int64(r.size))
		if len(waiting) == len(kinds) {
			got()
		}
		delete(waiting, r.typeURL)
		if err := s.SendMsg(&discovery.DeltaDiscoveryRequest{TypeUrl: r.typeURL, ResponseNonce: r.nonce}); err != nil {
			return err
		}
	}
	synced()
	select {
	case <-hold:
	case <-ctx.Done():
	}
	return nil
}

// counted is a DeltaDiscoveryResponse as the simulated agents read it: its size, type URL
// and nonce, the resources skipped undecoded (a real agent decodes on its own CPU; here one
// core plays thousands of agents, so decoding would measure the simulator, not kuma-cp).
type counted struct {
	size           int
	typeURL, nonce string
}

// Field numbers of envoy.service.discovery.v3.DeltaDiscoveryResponse.
const (
	fieldTypeURL = 4
	fieldNonce   = 5
)

// countingCodec reads responses into counted and writes requests as Protocol Buffers.
type countingCodec struct{ proto encoding.CodecV2 }

func (c countingCodec) Marshal(v any) (mem.BufferSlice, error) { return c.proto.Marshal(v) }
func (countingCodec) Name() string                             { return protoenc.Name }

func (c countingCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*counted)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	b := data.Materialize()
	r.size = len(b)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if typ == protowire.BytesType && (num == fieldTypeURL || num == fieldNonce) {
			val, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return protowire.ParseError(m)
			}
			if num == fieldTypeURL {
				r.typeURL = string(val)
			} else {
				r.nonce = string(val)
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return protowire.ParseError(m)
		}
		b = b[m:]
	}
	return nil
}

// servedKinds is the kinds of the link (cplink.Kinds) that the control plane at address
// serves: an earlier build (--baseline) refuses a kind added since, ending the stream.
func servedKinds(ctx context.Context, address string) ([]string, error) {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(linkCreds))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	var kinds []string
	for _, k := range cplink.Kinds {
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(kctx)
		if err == nil {
			err = s.Send(&discovery.DeltaDiscoveryRequest{Node: &core.Node{Id: "fleet-probe", Cluster: "default"}, TypeUrl: cplink.TypeURL(k)})
		}
		if err == nil {
			_, err = s.Recv()
		}
		cancel()
		switch status.Code(err) {
		case codes.OK:
			kinds = append(kinds, k)
		case codes.InvalidArgument: // a kind this build does not know
		default:
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return kinds, nil
}
