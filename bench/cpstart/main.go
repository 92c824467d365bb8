// Command cpstart measures what a control-plane replica costs for the mesh it holds: the
// time from its start to /ready and its resident memory, with N dataplanes stored in etcd.
//
//	go run ./bench/cpstart [--dataplanes 0,10000,100000] [--routers 0] [--runs 3] [--baseline BIN] [--profile DIR]
//
// It starts one etcd member (the etcd binary, on free loopback ports, in a temporary
// directory), writes N one-inbound Dataplanes through the store (transactions of 128, as
// the API's writes land; with --routers R, R Routers too, each selecting 3 of them as its
// gateway replicas, so that the routers' zones and status read the dataplanes), then
// starts the real kuma-cp (`serve --store etcd`) --runs times and reports the medians
// (with min and max) of: to-ready (exec to /ready 200: the store
// listed and decoded, the agents' tables built, the routers' zones built and served) and the CPU time the process took to get
// there (what a loaded machine does not blur), RSS and anonymous RSS once it has settled
// (quiet for two seconds running, then 2 s more: the start's work done and its garbage
// collected), the peak (VmHWM), and the bytes per stored dataplane
// over the empty store's figure, beside the stored size of a dataplane (its etcd value).
//
// With --baseline (another kuma-cp binary, e.g. the previous build), both are started in
// turn on the same etcd, run after run, and reported side by side. With --profile, this
// build serves its profiles (--metrics-pprof) and its heap profile once ready is written to
// DIR/heap-N.pb.gz for each size N (go tool pprof -sample_index=inuse_space; heap-N.txt is
// the same as text, ending with the runtime's memory statistics); with
// --cpu-seconds S too, its CPU profile over the S seconds from its start, to DIR/cpu-N.pb.gz.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kumadp/kuma-dp/bench/internal/procstat"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
)

func main() {
	sizes := pflag.String("dataplanes", "0,10000,100000", "dataplanes stored, comma-separated")
	routers = pflag.Int("routers", 0, "Routers stored beside them, each selecting 3 of the dataplanes (when there are that many) as its replicas")
	runs := pflag.Int("runs", 3, "starts of kuma-cp per size (medians reported)")
	kumaCP := pflag.String("kuma-cp", "", "the kuma-cp binary (default: built from this tree)")
	baseline := pflag.String("baseline", "", "another kuma-cp binary (the previous build) started in turn with it, on the same etcd")
	profile := pflag.String("profile", "", "write this build's heap profile once ready to DIR/heap-N.pb.gz (and with --cpu-seconds its CPU profile from its start to DIR/cpu-N.pb.gz)")
	cpuSeconds = pflag.Int("cpu-seconds", 0, "with --profile: profile the CPU for this long from the start (the diagnostics endpoint's first answer)")
	pflag.Parse()
	if err := run(*sizes, *runs, *kumaCP, *baseline, *profile); err != nil {
		fmt.Fprintln(os.Stderr, "cpstart:", err)
		os.Exit(1)
	}
}

var (
	cpuSeconds *int // --cpu-seconds
	routers    *int // --routers
)

type sample struct {
	ready, cpu      time.Duration // to /ready: wall clock, and the process's CPU time
	rss, anon, peak int64
}

// build is a kuma-cp binary measured; profile, when set, is where its heap profiles go.
type build struct {
	name, bin, profile string
}

func run(sizeList string, runs int, kumaCP, baseline, profile string) error {
	var ns []int
	for _, f := range strings.Split(sizeList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return fmt.Errorf("--dataplanes: %q is not a number", f)
		}
		ns = append(ns, n)
	}
	if runs < 1 {
		return fmt.Errorf("--runs %d: at least 1", runs)
	}
	tmp, err := os.MkdirTemp("", "cpstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if kumaCP, err = procstat.KumaCP(kumaCP, tmp); err != nil {
		return err
	}
	builds := []build{{name: "this", bin: kumaCP, profile: profile}}
	if baseline != "" {
		builds = append(builds, build{name: "baseline", bin: baseline})
	}
	if profile != "" {
		if err := os.MkdirAll(profile, 0o755); err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
	}
	token := filepath.Join(tmp, "admin.token")
	if err := os.WriteFile(token, []byte("bench-admin-token-0123456789abcdef\n"), 0o600); err != nil {
		return err
	}
	fmt.Printf("kuma-cp start and memory with N dataplanes in etcd, %d runs each, load %s\n", runs, procstat.LoadAvg())
	fmt.Printf("%-9s %-11s %26s %9s %8s %8s %8s %12s %12s\n", "BUILD", "DATAPLANES", "TO-READY med (min-max)", "CPU", "RSS MiB", "ANON MiB", "PEAK MiB", "B/DATAPLANE", "STORED B/DP")
	base := make([]sample, len(builds))
	for i, n := range ns {
		res, stored, err := measure(builds, tmp, token, n, runs)
		if err != nil {
			return fmt.Errorf("%d dataplanes: %w", n, err)
		}
		for b, s := range res {
			perDP := "-"
			if i > 0 && n > ns[0] {
				perDP = strconv.FormatInt((s[1].anon-base[b].anon)/int64(n-ns[0]), 10)
			}
			if i == 0 {
				base[b] = s[1]
			}
			fmt.Printf("%-9s %-11d %26s %9s %8s %8s %8s %12s %12d\n", builds[b].name, n,
				fmt.Sprintf("%s (%s-%s)", s[1].ready.Round(time.Millisecond), s[0].ready.Round(time.Millisecond), s[2].ready.Round(time.Millisecond)),
				s[1].cpu.Round(10*time.Millisecond), mib(s[1].rss), mib(s[1].anon), mib(s[1].peak), perDP, stored)
		}
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// measure stores n dataplanes in a new etcd and starts each build runs times, in turn; it
// returns for each build the min, median and max of each figure (each sorted on its own)
// and a dataplane's stored size.
func measure(builds []build, tmp, token string, n, runs int) ([][3]sample, int, error) {
	dir := filepath.Join(tmp, fmt.Sprintf("etcd-%d", n))
	client, peer, err := freePorts()
	if err != nil {
		return nil, 0, err
	}
	etcd := exec.Command("etcd", "--name", "bench", "--data-dir", dir,
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "bench=http://"+peer, "--quota-backend-bytes", strconv.Itoa(8<<30),
		"--log-level", "error")
	if err := etcd.Start(); err != nil {
		return nil, 0, fmt.Errorf("start etcd (apt-get install etcd-server): %w", err)
	}
	defer func() { _ = etcd.Process.Kill(); _ = etcd.Wait() }()
	stored, err := fill(client, n)
	if err != nil {
		return nil, 0, err
	}
	ss := make([][]sample, len(builds))
	for r := range runs {
		for i := range builds {
			b := (i + r) % len(builds) // each build goes first in turn
			bd := builds[b]
			prof := ""
			if bd.profile != "" && r == 0 {
				prof = filepath.Join(bd.profile, fmt.Sprintf("heap-%d.pb.gz", n))
			}
			s, err := startOnce(bd.bin, client, token, r, prof)
			if err != nil {
				return nil, 0, fmt.Errorf("%s: %w", bd.name, err)
			}
			ss[b] = append(ss[b], s)
		}
	}
	out := make([][3]sample, len(builds))
	for b := range builds {
		out[b] = spread(ss[b])
	}
	return out, stored, nil
}

// spread is the min, median and max of each figure of ss, each sorted on its own.
func spread(ss []sample) [3]sample {
	pick := func(get func(sample) int64) [3]int64 {
		v := make([]int64, len(ss))
		for i, s := range ss {
			v[i] = get(s)
		}
		sort.Slice(v, func(a, b int) bool { return v[a] < v[b] })
		return [3]int64{v[0], v[len(v)/2], v[len(v)-1]}
	}
	ready := pick(func(s sample) int64 { return int64(s.ready) })
	cpu := pick(func(s sample) int64 { return int64(s.cpu) })
	rss := pick(func(s sample) int64 { return s.rss })
	anon := pick(func(s sample) int64 { return s.anon })
	peak := pick(func(s sample) int64 { return s.peak })
	var out [3]sample
	for i := range out {
		out[i] = sample{ready: time.Duration(ready[i]), cpu: time.Duration(cpu[i]), rss: rss[i], anon: anon[i], peak: peak[i]}
	}
	return out
}

// fill writes n Dataplanes of mesh default, 128 to a transaction, and --routers Routers
// (router r selects dp-3r to dp-3r+2: their service is gw-r), and returns the size of one
// stored dataplane.
func fill(endpoint string, n int) (int, error) {
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 10 * time.Second})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	st := cpstore.NewEtcd(c, "/kuma")
	ctx := context.Background()
	for i := 0; i < n; i += 128 {
		var ws []cpstore.Write
		for j := i; j < n && j < i+128; j++ {
			svc := fmt.Sprint("svc-", j)
			if j < 3**routers {
				svc = fmt.Sprint("gw-", j/3)
			}
			doc := fmt.Sprintf("type: Dataplane\nmesh: default\nname: dp-%d\nnetworking:\n  address: 10.%d.%d.%d\n"+
				"  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: %s\n      kuma.io/zone: zone-%d\n      version: v1\n",
				j, j>>16&255, j>>8&255, j&255, svc, j%3)
			ws = append(ws, cpstore.Write{Key: cpstore.Key{Mesh: "default", Type: "Dataplane", Name: fmt.Sprintf("dp-%d", j)}, Doc: []byte(doc)})
		}
		if err := st.Txn(ctx, ws...); err != nil {
			return 0, fmt.Errorf("store %d dataplanes: %w", n, err)
		}
	}
	var ws []cpstore.Write
	for r := range *routers {
		doc := fmt.Sprintf("type: Router\nmesh: default\nname: shard%d\ndns: shard%d.apps.test\ndataplanes:\n  kuma.io/service: gw-%d\n", r, r, r)
		ws = append(ws, cpstore.Write{Key: cpstore.Key{Mesh: "default", Type: "Router", Name: fmt.Sprint("shard", r)}, Doc: []byte(doc)})
	}
	if len(ws) > 0 {
		if err := st.Txn(ctx, ws...); err != nil {
			return 0, fmt.Errorf("store %d routers: %w", len(ws), err)
		}
	}
	// read back (n = 0 too: the first start must not wait for etcd's own)
	resp, err := c.Get(ctx, "/kuma/", clientv3.WithPrefix(), clientv3.WithLimit(1))
	if n == 0 && err == nil {
		return 0, nil
	}
	if err != nil || len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("read back a stored dataplane: %v", err)
	}
	return len(resp.Kvs[0].Value), nil
}

// startOnce starts kumaCP on the store at endpoint and measures it once ready; with
// profile, it serves its profiles and its heap profile is written there.
func startOnce(kumaCP, endpoint, token string, run int, profile string) (sample, error) {
	dir, err := os.MkdirTemp("", "cpstart-run-")
	if err != nil {
		return sample{}, err
	}
	defer os.RemoveAll(dir)
	readyFile := filepath.Join(dir, "ready.json")
	args := []string{"serve", "--store", "etcd", "--etcd-endpoints", "http://" + endpoint,
		"--admin-token-file", token, "--api-address", "127.0.0.1:0", "--address", "127.0.0.1:0",
		"--metrics-address", "127.0.0.1:0", "--ready-file", readyFile, "--replica-id", fmt.Sprintf("bench-%d", run),
		"--log-level", "warn"}
	if profile != "" {
		args = append(args, "--metrics-pprof")
	}
	start := time.Now()
	cmd := exec.Command(kumaCP, args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return sample{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := start.Add(5 * time.Minute)
	cpuDone := make(chan error, 1)
	cpuStarted := false
	for time.Now().Before(deadline) {
		var info struct{ Metrics string }
		if b, err := os.ReadFile(readyFile); err == nil && json.Unmarshal(b, &info) == nil && info.Metrics != "" {
			if profile != "" && *cpuSeconds > 0 && !cpuStarted {
				cpuStarted = true // the start's CPU profile, from the first moment the endpoint answers
				go func() {
					cpuDone <- save(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", info.Metrics, *cpuSeconds), strings.Replace(profile, "heap-", "cpu-", 1))
				}()
			}
			if resp, err := http.Get("http://" + info.Metrics + "/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					s := sample{ready: time.Since(start), cpu: procstat.CPUTime(cmd.Process.Pid)}
					settle(cmd.Process.Pid)
					m := procstat.ReadMemory(cmd.Process.Pid)
					s.rss, s.anon, s.peak = m.RSS, m.Anon, m.Peak
					if profile != "" {
						if err := save("http://"+info.Metrics+"/debug/pprof/heap?gc=1", profile); err != nil {
							return s, err
						}
						// the same as text, ending with the runtime's MemStats (HeapInuse, HeapReleased...)
						if err := save("http://"+info.Metrics+"/debug/pprof/heap?debug=1", strings.TrimSuffix(profile, ".pb.gz")+".txt"); err != nil {
							return s, err
						}
					}
					if cpuStarted {
						return s, <-cpuDone
					}
					return s, nil
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sample{}, fmt.Errorf("kuma-cp not ready within 5 minutes")
}

// settle waits until the process is quiet - under 5% of a core over a second, twice running
// (its other readers of the store, the router shards' zones, may still be decoding it at
// /ready) - then 2 s more for its garbage to be collected; at most 2 minutes.
func settle(pid int) {
	deadline := time.Now().Add(2 * time.Minute)
	quiet, last := 0, procstat.CPUTime(pid)
	for quiet < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Second)
		now := procstat.CPUTime(pid)
		if now-last < 50*time.Millisecond {
			quiet++
		} else {
			quiet = 0
		}
		last = now
	}
	time.Sleep(2 * time.Second)
}

// save writes the profile served at url (--metrics-pprof) to path.
func save(url, path string) error {
	resp, err := http.Get(url)
	if err != nil {
		return fmt.Errorf("profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("profile %s: %s (a build without --metrics-pprof?)", url, resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func freePorts() (string, string, error) {
	var addrs []string
	var lns []net.Listener
	defer func() {
		for _, l := range lns {
			l.Close()
		}
	}()
	for range 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return "", "", err
		}
		lns = append(lns, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs[0], addrs[1], nil
}
