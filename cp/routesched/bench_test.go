package routesched

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/mesh"
)

func benchStore(b *testing.B) *store.Etcd {
	c := etcdtest.Start(b, 1)
	st := store.NewEtcd(c.Client(), fmt.Sprintf("/bench%d", time.Now().UnixNano()))
	ctx := context.Background()
	for _, s := range []string{"a", "b", "c"} {
		doc := routerDoc("shard-"+s, "shard: "+s)
		if _, err := st.Put(ctx, store.Key{Mesh: "default", Type: mesh.KindRouter, Name: "shard-" + s}, []byte(doc), store.Any); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := st.Put(ctx, store.Key{Mesh: "default", Type: mesh.KindRouter, Name: "catch-all"}, []byte(routerDoc("catch-all", "")), store.Any); err != nil {
		b.Fatal(err)
	}
	return st
}

func benchRoute(i int) []byte {
	labels := ""
	if s := i % 4; s < 3 {
		labels = fmt.Sprintf("shard: %c", 'a'+s)
	}
	return []byte(routeDoc(fmt.Sprint("team", i%7), fmt.Sprint("r", i), fmt.Sprint("h", i), labels))
}

// BenchmarkSchedule10000: 10,000 new routes in the store (4 routers); the time for the
// reconciler to bind them all (each binding one etcd transaction).
//
//	go test ./cp/routesched -run '^$' -bench Schedule10000 -benchtime 1x
func BenchmarkSchedule10000(b *testing.B) {
	const n = 10000
	for range b.N {
		b.StopTimer()
		st := benchStore(b)
		ctx := context.Background()
		putRoutes(b, st, n)
		rc := &Reconciler{Store: st, Log: quiet}
		b.StartTimer()
		start := time.Now()
		for rc.Metrics == nil || rc.Metrics.Scheduled.Load() < n {
			if _, _, err := rc.Pass(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/10000routes")
		b.ReportMetric(float64(rc.Metrics.Passes.Load()), "passes")
	}
}

// BenchmarkApplyToScheduled: with the reconciler running (as on the leader) over 1,000
// routes already bound, one route at a time is written and waited for until its status says
// scheduled; p50 and p99 of that time.
//
//	go test ./cp/routesched -run '^$' -bench 'ApplyToScheduled$' -benchtime 200x
func BenchmarkApplyToScheduled(b *testing.B) { applyToScheduled(b, 1000) }

// BenchmarkApplyToScheduled10000 is BenchmarkApplyToScheduled over 10,000 routes bound.
//
//	go test ./cp/routesched -run '^$' -bench ApplyToScheduled10000 -benchtime 200x
func BenchmarkApplyToScheduled10000(b *testing.B) { applyToScheduled(b, 10000) }

func applyToScheduled(b *testing.B, bound int) {
	st := benchStore(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	putRoutes(b, st, bound)
	m := &Metrics{}
	go (&Reconciler{Store: st, Metrics: m, Log: quiet}).Run(ctx)
	for m.Scheduled.Load() < uint64(bound) {
		time.Sleep(10 * time.Millisecond)
	}
	var lat []time.Duration
	passes := m.Passes.Load()
	b.ResetTimer()
	for i := range b.N {
		id := 100000 + i
		k := routeKey("default", fmt.Sprint("team", id%7), fmt.Sprint("r", id))
		start := time.Now()
		if _, err := st.Put(ctx, k, benchRoute(id), 0); err != nil {
			b.Fatal(err)
		}
		for {
			it, err := st.Get(ctx, k)
			if err != nil {
				b.Fatal(err)
			}
			r, err := DecodeRoute(it)
			if err != nil {
				b.Fatal(err)
			}
			if r.PhaseOf() == mesh.PhaseScheduled {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(m.Passes.Load()-passes)/float64(b.N), "passes/op")
}

// putRoutes writes n new routes (benchRoute), 16 writers at once.
func putRoutes(b *testing.B, st store.Store, n int) {
	var wg sync.WaitGroup
	var failed atomic.Value
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				if _, err := st.Put(context.Background(), routeKey("default", fmt.Sprint("team", i%7), fmt.Sprint("r", i)), benchRoute(i), store.Any); err != nil {
					failed.Store(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPassOnMirror10000: one pass of the leader's reconciler as a watched change runs it
// (on what it holds, not a listing), 10,000 routes bound and nothing to do - one route's key
// shown changed, at the version already kept: the CPU a single write pays for the routes it
// did not change.
//
//	go test ./cp/routesched -run '^$' -bench PassOnMirror10000 -benchmem
func BenchmarkPassOnMirror10000(b *testing.B) {
	st := benchStore(b)
	ctx := context.Background()
	putRoutes(b, st, 10000)
	rc := &Reconciler{Store: st, Log: quiet}
	for rc.Metrics == nil || rc.Metrics.Scheduled.Load() < 10000 {
		if _, _, err := rc.Pass(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if _, _, err := rc.Pass(ctx); err != nil { // the bindings as written
		b.Fatal(err)
	}
	k := routeKey("default", "team1", "r1")
	b.ResetTimer()
	for range b.N {
		rc.mirror.dirty[k] = struct{}{}
		if _, err := rc.passOnMirror(ctx, false); err != nil {
			b.Fatal(err)
		}
	}
}
