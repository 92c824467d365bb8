// Command cpstart measures what a control-plane replica costs for the mesh it holds: the
// time from its start to /ready and its resident memory, with N dataplanes stored in etcd.
//
//	go run ./bench/cpstart [--dataplanes 0,10000,100000] [--runs 3]
//
// It starts one etcd member (the etcd binary, on free loopback ports, in a temporary
// directory), writes N one-inbound Dataplanes through the store (transactions of 128, as
// the API's writes land), then starts the real kuma-cp (`serve --store etcd`) --runs times
// and reports the medians (with min and max) of: to-ready (exec to /ready 200: the store
// listed and decoded, the agents' tables built), RSS and anonymous RSS once ready (after
// 2 s, the start's garbage collected), the peak (VmHWM), and the bytes per stored dataplane
// over the empty store's figure, beside the stored size of a dataplane (its etcd value).
package main

import (
	"context"
	"encoding/json"
	"fmt"
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
	runs := pflag.Int("runs", 3, "starts of kuma-cp per size (medians reported)")
	kumaCP := pflag.String("kuma-cp", "", "the kuma-cp binary (default: built from this tree)")
	pflag.Parse()
	if err := run(*sizes, *runs, *kumaCP); err != nil {
		fmt.Fprintln(os.Stderr, "cpstart:", err)
		os.Exit(1)
	}
}

type sample struct {
	ready           time.Duration
	rss, anon, peak int64
}

func run(sizeList string, runs int, kumaCP string) error {
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
	if kumaCP == "" {
		kumaCP = filepath.Join(tmp, "kuma-cp")
		if err := procstat.Build("./cmd/kuma-cp", kumaCP); err != nil {
			return err
		}
	}
	token := filepath.Join(tmp, "admin.token")
	if err := os.WriteFile(token, []byte("bench-admin-token-0123456789abcdef\n"), 0o600); err != nil {
		return err
	}
	fmt.Printf("kuma-cp start and memory with N dataplanes in etcd, %d runs each, load %s\n", runs, procstat.LoadAvg())
	fmt.Printf("%-11s %22s %18s %18s %18s %16s %12s\n", "DATAPLANES", "TO-READY med (min-max)", "RSS MiB", "ANON MiB", "PEAK MiB", "B/DATAPLANE", "STORED B/DP")
	var base sample
	for i, n := range ns {
		s, stored, err := measure(kumaCP, tmp, token, n, runs)
		if err != nil {
			return fmt.Errorf("%d dataplanes: %w", n, err)
		}
		perDP := "-"
		if i > 0 && n > ns[0] {
			perDP = strconv.FormatInt((s[1].anon-base.anon)/int64(n-ns[0]), 10)
		}
		if i == 0 {
			base = s[1]
		}
		fmt.Printf("%-11d %22s %18s %18s %18s %16s %12d\n", n,
			fmt.Sprintf("%s (%s-%s)", s[1].ready.Round(time.Millisecond), s[0].ready.Round(time.Millisecond), s[2].ready.Round(time.Millisecond)),
			mib(s[1].rss), mib(s[1].anon), mib(s[1].peak), perDP, stored)
	}
	return nil
}

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// measure stores n dataplanes in a new etcd and starts kuma-cp runs times; it returns the
// min, median and max of each figure (each sorted on its own) and a dataplane's stored size.
func measure(kumaCP, tmp, token string, n, runs int) ([3]sample, int, error) {
	var out [3]sample
	dir := filepath.Join(tmp, fmt.Sprintf("etcd-%d", n))
	client, peer, err := freePorts()
	if err != nil {
		return out, 0, err
	}
	etcd := exec.Command("etcd", "--name", "bench", "--data-dir", dir,
		"--listen-client-urls", "http://"+client, "--advertise-client-urls", "http://"+client,
		"--listen-peer-urls", "http://"+peer, "--initial-advertise-peer-urls", "http://"+peer,
		"--initial-cluster", "bench=http://"+peer, "--quota-backend-bytes", strconv.Itoa(8<<30),
		"--log-level", "error")
	if err := etcd.Start(); err != nil {
		return out, 0, fmt.Errorf("start etcd (apt-get install etcd-server): %w", err)
	}
	defer func() { _ = etcd.Process.Kill(); _ = etcd.Wait() }()
	stored, err := fill(client, n)
	if err != nil {
		return out, 0, err
	}
	var ss []sample
	for r := range runs {
		s, err := startOnce(kumaCP, client, token, r)
		if err != nil {
			return out, 0, err
		}
		ss = append(ss, s)
	}
	pick := func(get func(sample) int64) [3]int64 {
		v := make([]int64, len(ss))
		for i, s := range ss {
			v[i] = get(s)
		}
		sort.Slice(v, func(a, b int) bool { return v[a] < v[b] })
		return [3]int64{v[0], v[len(v)/2], v[len(v)-1]}
	}
	ready := pick(func(s sample) int64 { return int64(s.ready) })
	rss := pick(func(s sample) int64 { return s.rss })
	anon := pick(func(s sample) int64 { return s.anon })
	peak := pick(func(s sample) int64 { return s.peak })
	for i := range out {
		out[i] = sample{ready: time.Duration(ready[i]), rss: rss[i], anon: anon[i], peak: peak[i]}
	}
	return out, stored, nil
}

// fill writes n Dataplanes of mesh default, 128 to a transaction, and returns the size of
// one stored value.
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
			doc := fmt.Sprintf("type: Dataplane\nmesh: default\nname: dp-%d\nnetworking:\n  address: 10.%d.%d.%d\n"+
				"  inbound:\n  - port: 8080\n    tags:\n      kuma.io/service: svc-%d\n      kuma.io/zone: zone-%d\n      version: v1\n",
				j, j>>16&255, j>>8&255, j&255, j, j%3)
			ws = append(ws, cpstore.Write{Key: cpstore.Key{Mesh: "default", Type: "Dataplane", Name: fmt.Sprintf("dp-%d", j)}, Doc: []byte(doc)})
		}
		if err := st.Txn(ctx, ws...); err != nil {
			return 0, fmt.Errorf("store %d dataplanes: %w", n, err)
		}
	}
	if n == 0 {
		return 0, nil
	}
	resp, err := c.Get(ctx, "/kuma/", clientv3.WithPrefix(), clientv3.WithLimit(1))
	if err != nil || len(resp.Kvs) == 0 {
		return 0, fmt.Errorf("read back a stored dataplane: %v", err)
	}
	return len(resp.Kvs[0].Value), nil
}

func startOnce(kumaCP, endpoint, token string, run int) (sample, error) {
	dir, err := os.MkdirTemp("", "cpstart-run-")
	if err != nil {
		return sample{}, err
	}
	defer os.RemoveAll(dir)
	readyFile := filepath.Join(dir, "ready.json")
	start := time.Now()
	cmd := exec.Command(kumaCP, "serve", "--store", "etcd", "--etcd-endpoints", "http://"+endpoint,
		"--admin-token-file", token, "--api-address", "127.0.0.1:0", "--address", "127.0.0.1:0",
		"--metrics-address", "127.0.0.1:0", "--ready-file", readyFile, "--replica-id", fmt.Sprintf("bench-%d", run),
		"--log-level", "warn")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return sample{}, err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	deadline := start.Add(5 * time.Minute)
	for time.Now().Before(deadline) {
		var info struct{ Metrics string }
		if b, err := os.ReadFile(readyFile); err == nil && json.Unmarshal(b, &info) == nil && info.Metrics != "" {
			if resp, err := http.Get("http://" + info.Metrics + "/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					s := sample{ready: time.Since(start)}
					time.Sleep(2 * time.Second)
					m := procstat.ReadMemory(cmd.Process.Pid)
					s.rss, s.anon, s.peak = m.RSS, m.Anon, m.Peak
					return s, nil
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return sample{}, fmt.Errorf("kuma-cp not ready within 5 minutes")
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
