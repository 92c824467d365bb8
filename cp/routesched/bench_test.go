package routesched

import (
	"cmp"
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
func BenchmarkApplyToScheduled(b *testing.B) { applyToScheduled(b, 1000, 0) }

// BenchmarkApplyToScheduled10000 is BenchmarkApplyToScheduled over 10,000 routes bound.
//
//	go test ./cp/routesched -run '^$' -bench ApplyToScheduled10000 -benchtime 200x
func BenchmarkApplyToScheduled10000(b *testing.B) { applyToScheduled(b, 10000, 0) }

// BenchmarkApplyToScheduledSpaced10000 is BenchmarkApplyToScheduled10000 with 100 ms between
// a write scheduled and the next (writes one at a time, as a person or a deploy makes them,
// not a burst).
//
//	go test ./cp/routesched -run '^$' -bench ApplyToScheduledSpaced10000 -benchtime 100x
func BenchmarkApplyToScheduledSpaced10000(b *testing.B) {
	applyToScheduled(b, 10000, 100*time.Millisecond)
}

// applyToScheduled writes a route and waits until it is scheduled, b.N times, pause between
// one scheduled and the next write.
func applyToScheduled(b *testing.B, bound int, pause time.Duration) {
	st := &tracedStore{Etcd: benchStore(b)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	putRoutes(b, st, bound)
	m := &Metrics{}
	go (&Reconciler{Store: st, Metrics: m, Log: quiet}).Run(ctx)
	for m.Scheduled.Load() < uint64(bound) {
		time.Sleep(10 * time.Millisecond)
	}
	var lat []time.Duration
	var ways []way
	passes := m.Passes.Load()
	b.ResetTimer()
	for i := range b.N {
		id := 100000 + i
		k := routeKey("default", fmt.Sprint("team", id%7), fmt.Sprint("r", id))
		st.follow(k)
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
		ways = append(ways, st.way(start, time.Now()))
		time.Sleep(pause)
	}
	b.StopTimer()
	reportWays(b, ways)
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(m.Passes.Load()-passes)/float64(b.N), "passes/op")
}

// tracedStore times one route's way from its write to its status read scheduled: the
// watch delivering the write, the reconciler's wait and pass until the binding's
// transaction is sent, the transaction, and the status read back.
type tracedStore struct {
	*store.Etcd
	mu                     sync.Mutex
	key                    store.Key
	event, txnSent, txnEnd time.Time
}

// way is one write's time in each stage.
type way struct{ deliver, pass, txn, readBack, total time.Duration }

func (s *tracedStore) follow(k store.Key) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key, s.event, s.txnSent, s.txnEnd = k, time.Time{}, time.Time{}, time.Time{}
}

func (s *tracedStore) way(start, done time.Time) way {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.txnEnd.IsZero() { // read back before the transaction's answer
		s.txnEnd = done
	}
	return way{s.event.Sub(start), s.txnSent.Sub(s.event), s.txnEnd.Sub(s.txnSent), done.Sub(s.txnEnd), done.Sub(start)}
}

func (s *tracedStore) Watch(ctx context.Context, from int64) <-chan store.Event {
	in := s.Etcd.Watch(ctx, from)
	out := make(chan store.Event, 64)
	go func() {
		defer close(out)
		for e := range in {
			s.mu.Lock()
			if e.Item.Key == s.key && s.event.IsZero() {
				s.event = time.Now()
			}
			s.mu.Unlock()
			select {
			case out <- e:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func (s *tracedStore) Txn(ctx context.Context, ws ...store.Write) error {
	ours := false
	s.mu.Lock()
	for _, w := range ws {
		if w.Key == s.key && !w.Check {
			ours = true
			s.txnSent, s.txnEnd = time.Now(), time.Time{}
		}
	}
	s.mu.Unlock()
	err := s.Etcd.Txn(ctx, ws...)
	if ours && err == nil {
		s.mu.Lock()
		s.txnEnd = time.Now()
		s.mu.Unlock()
	}
	return err
}

// reportWays reports each stage's median, and logs the stages of the slowest writes.
func reportWays(b *testing.B, ways []way) {
	med := func(f func(way) time.Duration) float64 {
		ds := make([]time.Duration, len(ways))
		for i, w := range ways {
			ds[i] = f(w)
		}
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(func(w way) time.Duration { return w.deliver }), "watch-p50-ms")
	b.ReportMetric(med(func(w way) time.Duration { return w.pass }), "to-txn-p50-ms")
	b.ReportMetric(med(func(w way) time.Duration { return w.txn }), "txn-p50-ms")
	b.ReportMetric(med(func(w way) time.Duration { return w.readBack }), "read-back-p50-ms")
	slices.SortFunc(ways, func(a, c way) int { return cmp.Compare(c.total, a.total) })
	for _, w := range ways[:min(3, len(ways))] {
		b.Logf("slow write: %v: watch %v, wait and pass until the transaction %v, transaction %v, read back %v", w.total, w.deliver, w.pass, w.txn, w.readBack)
	}
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

// BenchmarkPassCheckingAll10000: the pass every Resync that checks every binding and
// every router's admission again (on what the watch has shown), 10,000 routes bound.
//
//	go test ./cp/routesched -run '^$' -bench PassCheckingAll10000 -benchmem
func BenchmarkPassCheckingAll10000(b *testing.B) {
	rc := boundReconciler(b, 10000)
	b.ResetTimer()
	for range b.N {
		if _, err := rc.passOnMirror(context.Background(), true, -1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkResyncPass10000: the pass every tenth of a Resync, 10,000 routes bound and
// nothing else to do: a slice of the routes checked again from scratch (a hundredth), and
// in 4 slices of 100 a router's admission computed in full.
//
//	go test ./cp/routesched -run '^$' -bench ResyncPass10000 -benchmem
func BenchmarkResyncPass10000(b *testing.B) {
	rc := boundReconciler(b, 10000)
	b.ResetTimer()
	for i := range b.N {
		if _, err := rc.passOnMirror(context.Background(), false, i%checkSlices); err != nil {
			b.Fatal(err)
		}
	}
}

// boundReconciler is a reconciler that has bound n routes (benchRoute) and read them back.
func boundReconciler(b *testing.B, n int) *Reconciler {
	st := benchStore(b)
	ctx := context.Background()
	putRoutes(b, st, n)
	rc := &Reconciler{Store: st, Log: quiet}
	for rc.Metrics == nil || rc.Metrics.Scheduled.Load() < uint64(n) {
		if _, _, err := rc.Pass(ctx); err != nil {
			b.Fatal(err)
		}
	}
	if _, _, err := rc.Pass(ctx); err != nil { // the bindings as written
		b.Fatal(err)
	}
	return rc
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
		if _, err := rc.passOnMirror(ctx, false, -1); err != nil {
			b.Fatal(err)
		}
	}
}
