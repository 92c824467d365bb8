package routesched

import (
	"context"
	"fmt"
	"slices"
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
		for i := range n {
			if _, err := st.Put(ctx, routeKey("default", fmt.Sprint("team", i%7), fmt.Sprint("r", i)), benchRoute(i), store.Any); err != nil {
				b.Fatal(err)
			}
		}
		rc := &Reconciler{Store: st}
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
//	go test ./cp/routesched -run '^$' -bench ApplyToScheduled -benchtime 200x
func BenchmarkApplyToScheduled(b *testing.B) {
	st := benchStore(b)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 1000 {
		if _, err := st.Put(ctx, routeKey("default", fmt.Sprint("team", i%7), fmt.Sprint("r", i)), benchRoute(i), store.Any); err != nil {
			b.Fatal(err)
		}
	}
	m := &Metrics{}
	go (&Reconciler{Store: st, Metrics: m}).Run(ctx)
	for m.Scheduled.Load() < 1000 {
		time.Sleep(10 * time.Millisecond)
	}
	var lat []time.Duration
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
}
