package routesched

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/mesh"
)

// txnCount counts the transactions written through it.
type txnCount struct {
	store.Transactional
	n atomic.Int64
}

func (c *txnCount) Txn(ctx context.Context, ws ...store.Write) error {
	c.n.Add(1)
	return c.Transactional.Txn(ctx, ws...)
}

// A pass binds its new routes many to a transaction, within etcd's limits (a real member,
// its default --max-txn-ops: a batch over it is refused), one binding per route.
func TestNewRoutesBoundInBatches(t *testing.T) {
	const n = 300
	st := newStore(t)
	put(t, st, mesh.KindRouter, "a", routerDoc("a", ""))
	put(t, st, mesh.KindRouter, "b", routerDoc("b", ""))
	for i := range n {
		put(t, st, mesh.KindRoute, fmt.Sprintf("r%d.shop", i), routeDoc("shop", fmt.Sprint("r", i), fmt.Sprint("h", i), ""))
	}
	count := &txnCount{Transactional: st}
	m := &Metrics{}
	pass(t, &Reconciler{Store: count, Metrics: m, Log: quiet})
	if got := m.Scheduled.Load(); got != n {
		t.Fatalf("%d routes bound by one pass, want %d", got, n)
	}
	// 2 comparisons a route and one a router: 62 routes a transaction at most
	if got, most := count.n.Load(), int64(n/((store.MaxTxnOps-2)/2)+1); got > most {
		t.Errorf("%d transactions for %d bindings, want at most %d", got, n, most)
	}
	bs := bindingsOf(t, st)
	if len(bs) != n {
		t.Fatalf("%d bindings, want %d", len(bs), n)
	}
	for i := range n {
		if ok, why := scheduled(t, st, "shop", fmt.Sprint("r", i), ""); !ok {
			t.Fatalf("route r%d: %s", i, why)
		}
	}
}

// A route changed or deleted, or given a binding by another writer, between the pass's read
// and its batched write is not bound from the stale read: its batch is split until the
// routes that changed are found, the others are bound, and the next passes bind the changed
// ones as they are then - one binding per route. Without the comparisons on each route's
// version and on its binding's absence, the batch bound the old host's name, or a deleted
// route, or wrote over the binding another writer made.
func TestBatchNeverBindsWhatChangedSinceTheRead(t *testing.T) {
	const n = 200
	c := etcdtest.Start(t, 3)
	st := store.NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	put(t, st, mesh.KindRouter, "a", routerDoc("a", ""))
	for i := range n {
		put(t, st, mesh.KindRoute, fmt.Sprintf("r%d.shop", i), routeDoc("shop", fmt.Sprint("r", i), fmt.Sprint("h", i), ""))
	}
	// changed in the first batch and in a later one
	changed, deleted, boundElsewhere := []int{5, 150}, []int{7, 120}, 9
	var otherVer int64
	m := &Metrics{}
	rc := &Reconciler{Store: &txnHook{Transactional: st, before: func() {
		for _, i := range changed {
			updateRoute(t, st, "shop", fmt.Sprint("r", i), func(r *mesh.Route) { r.Host = fmt.Sprint("new", i) })
		}
		for _, i := range deleted {
			if err := st.Delete(ctx, routeKey("default", "shop", fmt.Sprint("r", i)), store.Any); err != nil {
				t.Error(err)
			}
		}
		// a binding alone, its route untouched (written past the API, or restored)
		name := fmt.Sprint("r", boundElsewhere)
		b := &mesh.RouteBinding{Meta: mesh.Meta{Name: mesh.RouteKeyName("shop", name)}, RouteNamespace: "shop", RouteName: name, Router: "a", DNS: fmt.Sprintf("shop-h%d.a.apps.example.com", boundElsewhere)}
		it, err := st.Put(ctx, bindingKey("default", "shop", name), Encode(b), 0)
		if err != nil {
			t.Error(err)
		}
		otherVer = it.Version
	}}, Metrics: m, Log: quiet}
	next := pass(t, rc)
	bs := bindingsOf(t, st)
	if it, err := st.Get(ctx, bindingKey("default", "shop", fmt.Sprint("r", boundElsewhere))); err != nil || it.Version != otherVer {
		t.Errorf("the binding another writer made (version %d): version %d, %v: written over", otherVer, it.Version, err)
	}
	for _, i := range append(changed, deleted...) {
		if b := bs[fmt.Sprint("shop/r", i)]; b != nil {
			t.Errorf("route r%d, changed or deleted after the pass read it, was bound from the stale read: %+v", i, b)
		}
	}
	for _, i := range changed {
		if r := getRoute(t, st, "shop", fmt.Sprint("r", i)); r.PhaseOf() != mesh.PhaseNew || r.Host != fmt.Sprint("new", i) {
			t.Errorf("route r%d after the pass: host %s, status %+v (want its new host, still new)", i, r.Host, r.Status)
		}
	}
	if want := n - len(changed) - len(deleted); len(bs) != want || m.Scheduled.Load() != uint64(want-1) {
		t.Errorf("%d bindings, %d made by the pass; want %d, %d: the routes unchanged in a batch with a changed one are bound", len(bs), m.Scheduled.Load(), want, want-1)
	}
	if next.IsZero() {
		t.Error("no next pass due: the changed routes wait for the resync")
	}
	// the next passes: the changed routes bound as they are now; the binding made past the
	// API, which its route's status does not show, undone, then made again
	pass(t, rc)
	pass(t, rc)
	bs = bindingsOf(t, st)
	if len(bs) != n-len(deleted) {
		t.Errorf("after the next pass: %d bindings, want %d", len(bs), n-len(deleted))
	}
	for _, i := range changed {
		if b := bs[fmt.Sprint("shop/r", i)]; b == nil || b.DNS != fmt.Sprintf("shop-new%d.a.apps.example.com", i) {
			t.Errorf("route r%d after the next passes: binding %+v, want its new name", i, b)
		}
	}
	for i := range n {
		if slices.Contains(deleted, i) {
			continue
		}
		if ok, why := scheduled(t, st, "shop", fmt.Sprint("r", i), "a"); !ok {
			t.Errorf("route r%d after the next passes: %s", i, why)
		}
	}
}

// A pass on a watched change checks and writes only what the change touched: one route
// added beside routes bound leaves their statuses as they are (no write), all admitted, and
// the new route is bound and admitted. (A router touched after its admission was computed
// had every route of it rewritten not admitted.)
func TestOneRouteAddedLeavesTheOthersAlone(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put(t, st, mesh.KindRouter, "a", routerDoc("a", "shard: a"))
	put(t, st, mesh.KindRouter, "b", routerDoc("b", "shard: b"))
	const n = 40
	for i := range n {
		put(t, st, mesh.KindRoute, fmt.Sprintf("r%d.shop", i), routeDoc("shop", fmt.Sprint("r", i), fmt.Sprint("h", i), fmt.Sprintf("shard: %c", 'a'+i%2)))
	}
	m := &Metrics{}
	go (&Reconciler{Store: st, Metrics: m, Log: quiet}).Run(ctx)
	eventually(t, "the routes bound", func() (bool, string) { return m.Scheduled.Load() == n, fmt.Sprint(m.Scheduled.Load()) })
	// a route no router takes: a pass that binds nothing, after the bindings are read back
	put(t, st, mesh.KindRoute, "z.shop", routeDoc("shop", "z", "z", "shard: z"))
	eventually(t, "route z not scheduled", func() (bool, string) {
		r := getRoute(t, st, "shop", "z")
		return r.Status != nil && r.Status.Reason == mesh.ReasonNoRouterMatches, fmt.Sprintf("%+v", r.Status)
	})
	versions := map[string]int64{}
	items, _, _, err := st.List(ctx, "default", mesh.KindRoute, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items {
		versions[it.Name] = it.Version
	}
	put(t, st, mesh.KindRoute, "new.shop", routeDoc("shop", "new", "new", "shard: a"))
	eventually(t, "the new route bound", func() (bool, string) { return scheduled(t, st, "shop", "new", "") })
	time.Sleep(300 * time.Millisecond)
	for i := range n {
		name := fmt.Sprint("r", i)
		it, err := st.Get(ctx, routeKey("default", "shop", name))
		if err != nil {
			t.Fatal(err)
		}
		if it.Version != versions[name+".shop"] {
			r := getRoute(t, st, "shop", name)
			t.Errorf("route %s written by the pass that bound another: status %+v", name, r.Status)
		}
	}
	for _, name := range []string{"r0", "r1", "new"} {
		if r := getRoute(t, st, "shop", name); len(r.Status.Ingress) != 1 || r.Status.Ingress[0].Conditions[0].Status != "True" {
			t.Errorf("route %s: ingress %+v, want admitted", name, r.Status.Ingress)
		}
	}
}
