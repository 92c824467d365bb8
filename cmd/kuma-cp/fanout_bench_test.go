package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
)

// BenchmarkFanoutEtcd: `-agents` simulated agents (KUMA_CP_BENCH_AGENTS, default 1,000) over
// `-replicas` kuma-cp processes (KUMA_CP_BENCH_REPLICAS, default 1) serving one real etcd
// (internal/etcdtest), each agent a real gRPC stream on its own connection (plain text on
// loopback: no TLS handshakes to share the two cores with) speaking the link's protocol as
// BenchmarkFanout's do (decode and validate every resource, ACK). The inventory holds one
// Dataplane per agent (up to 1,000; KUMA_CP_BENCH_INVENTORY). While it runs, a writer keeps the control plane busy with
// KUMA_CP_BENCH_WRITES (default 50) writes a second through the store, of TrafficRoutes in
// another mesh: every replica's watch and feed handle them; no agent is sent them. Each
// iteration changes one Dataplane of the inventory in etcd and waits until every agent
// has received it. KUMA_CP_BENCH_BIN runs another kuma-cp binary (an older build, for a
// before/after in one run). Reported:
//
//	p50-ms, p99-ms     from the etcd write's start to each agent holding the change
//	put-max-ms         the slowest of those etcd writes (its commit is in every latency)
//	delta-B/agent      bytes received per agent for one change
//	cp-KiB/agent       the replicas' RSS growth per connected agent (all replicas summed)
//	cp-cpu-ms/change   the replicas' CPU time per change, the background writes included
//	bg-writes/s        the background writes that landed
//
//	KUMA_CP_BENCH_AGENTS=10000 KUMA_CP_BENCH_REPLICAS=3 go test ./cmd/kuma-cp -run '^$' -bench FanoutEtcd -benchtime 20x -timeout 30m
func BenchmarkFanoutEtcd(b *testing.B) {
	agents := envInt("KUMA_CP_BENCH_AGENTS", 1000)
	replicas := envInt("KUMA_CP_BENCH_REPLICAS", 1)
	writes := envInt("KUMA_CP_BENCH_WRITES", 50)
	inventory := envInt("KUMA_CP_BENCH_INVENTORY", min(agents, 1000))
	cpBin := os.Getenv("KUMA_CP_BENCH_BIN")
	if cpBin == "" {
		cpBin, _ = binaries(b)
	}
	cluster := etcdtest.Start(b, 1)
	cl := cluster.Client()
	st := cpstore.NewEtcd(cl, "/kuma")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// The inventory: KUMA_CP_BENCH_INVENTORY Dataplanes (one per agent up to 1,000: every
	// agent's first sync is the whole inventory, decoded and validated, and 10,000 agents
	// decoding 10,000 each would take this machine an hour), and a VirtualOutbound.
	{
		sem := make(chan struct{}, 32)
		var wg sync.WaitGroup
		var failed atomic.Value
		for i := range inventory {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if _, err := st.Put(ctx, cpstore.Key{Mesh: "default", Type: "Dataplane", Name: dpName(i)}, []byte(dataplaneDoc(i, 0)), cpstore.Any); err != nil {
					failed.Store(err)
				}
			}()
		}
		wg.Wait()
		if err, _ := failed.Load().(error); err != nil {
			b.Fatal(err)
		}
		if _, err := st.Put(ctx, cpstore.Key{Mesh: "default", Type: "VirtualOutbound", Name: "vo"}, []byte(virtualOutbound("default", "{{version}}.{{service}}.mesh")), cpstore.Any); err != nil {
			b.Fatal(err)
		}
	}

	dir := b.TempDir()
	admin := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(admin, []byte("bench-admin"), 0o600); err != nil {
		b.Fatal(err)
	}
	var cps []*benchProc
	for r := range replicas {
		ready := filepath.Join(dir, fmt.Sprintf("ready-%d.json", r))
		p := startBenchProc(b, cpBin, "serve", "--store", "etcd", "--etcd-endpoints", cluster.Endpoints()[0],
			"--address", "127.0.0.1:0", "--api-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0",
			"--admin-token-file", admin, "--replica-id", fmt.Sprintf("r%d", r), "--max-connections-per-ip", "0",
			"--ready-file", ready, "--log-level", "warn")
		p.addr = p.waitAddress(ready)
		cps = append(cps, p)
	}
	rss := func() (kib int64) {
		for _, p := range cps {
			kib += rssKiB(b, p.pid())
		}
		return kib
	}
	cpu := func() (ms float64) {
		for _, p := range cps {
			ms += cpuMs(b, p.pid())
		}
		return ms
	}
	time.Sleep(500 * time.Millisecond) // the replicas read the store
	rssBefore := rss()

	sims := connectSims(ctx, b, agents, func(i int) (string, string, credentials.TransportCredentials) {
		return cps[i%replicas].addr, "", insecure.NewCredentials()
	})
	time.Sleep(time.Second) // let the last connections settle before measuring memory
	rssAfter := rss()
	fullBytes := sentBytes(sims)

	// The background writes.
	var landed atomic.Int64
	wctx, wstop := context.WithCancel(ctx)
	wdone := make(chan struct{})
	go func() {
		defer close(wdone)
		if writes <= 0 {
			return
		}
		t := time.NewTicker(time.Second / time.Duration(writes))
		defer t.Stop()
		for n := 0; ; n++ {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			doc := fmt.Sprintf("type: TrafficRoute\nmesh: busy\nname: tr-%d\nsources:\n- match:\n    kuma.io/service: '*'\ndestinations:\n- match:\n    kuma.io/service: svc-%d\nconf:\n- weight: 100\n  destination:\n    kuma.io/service: svc-%d\n    version: v%d\n", n%100, n%100, n%100, n)
			if _, err := st.Put(wctx, cpstore.Key{Mesh: "busy", Type: "TrafficRoute", Name: fmt.Sprintf("tr-%d", n%100)}, []byte(doc), cpstore.Any); err == nil {
				landed.Add(1)
			}
		}
	}()
	time.Sleep(500 * time.Millisecond)
	cpuBefore := cpu()
	bgStart := time.Now()
	landedBefore := landed.Load()

	var lat, puts []time.Duration
	b.ResetTimer()
	for n := range b.N {
		start := time.Now()
		if _, err := st.Put(ctx, cpstore.Key{Mesh: "default", Type: "Dataplane", Name: dpName(n % inventory)}, []byte(dataplaneDoc(n%inventory, n+1)), cpstore.Any); err != nil {
			b.Fatal(err)
		}
		puts = append(puts, time.Since(start))
		lat = awaitChange(b, sims, n, start, 60*time.Second, lat)
	}
	b.StopTimer()
	cpuUsed := cpu() - cpuBefore
	bgRate := float64(landed.Load()-landedBefore) / time.Since(bgStart).Seconds()
	wstop()
	<-wdone
	allBytes := sentBytes(sims)
	b.ReportMetric(quantile(lat, 0.50), "p50-ms")
	b.ReportMetric(quantile(lat, 0.99), "p99-ms")
	b.ReportMetric(quantile(puts, 1), "put-max-ms")
	b.ReportMetric(float64(allBytes-fullBytes)/float64(agents)/float64(b.N), "delta-B/agent")
	b.ReportMetric(float64(fullBytes)/float64(agents), "full-B/agent")
	b.ReportMetric(float64(rssAfter-rssBefore)/float64(agents), "cp-KiB/agent")
	b.ReportMetric(cpuUsed/float64(b.N), "cp-cpu-ms/change")
	b.ReportMetric(bgRate, "bg-writes/s")
	b.ReportMetric(float64(agents), "agents")
	b.ReportMetric(float64(replicas), "replicas")
	b.ReportMetric(float64(inventory), "inventory")
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// dataplaneDoc is Dataplane i with version tag v<gen> (benchEnv.writeDataplane's document).
func dataplaneDoc(i, gen int) string {
	return fmt.Sprintf(`type: Dataplane
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
}
