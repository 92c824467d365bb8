package routesched

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/mesh"
)

func newStore(t *testing.T) *store.Etcd {
	c := etcdtest.Start(t, 1)
	return store.NewEtcd(c.Client(), "/kuma")
}

func put(t *testing.T, st store.Store, kind, name, doc string) {
	t.Helper()
	k := store.Key{Mesh: "default", Type: kind, Name: name}
	if _, err := mesh.Decode(k.String(), []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(context.Background(), k, []byte(doc), store.Any); err != nil {
		t.Fatal(err)
	}
}

func routerDoc(name, selector string) string {
	return fmt.Sprintf("type: Router\nname: %s\ndns: %s.apps.example.com\nrouteSelector: {%s}\n", name, name, selector)
}

func routeDoc(ns, name, host, labels string) string {
	return fmt.Sprintf("type: Route\nname: %s\nnamespace: %s\nhost: %s\nlabels: {%s}\nto: {service: web, port: 80}\n", name, ns, host, labels)
}

// userRoute keeps status when given: the reconciler's writes are kept by later puts here
// only through the store's compare-and-set, as the API does.
func updateRoute(t *testing.T, st store.Store, ns, name string, edit func(*mesh.Route)) {
	t.Helper()
	ctx := context.Background()
	for {
		it, err := st.Get(ctx, routeKey("default", ns, name))
		if err != nil {
			t.Fatal(err)
		}
		r, err := DecodeRoute(it)
		if err != nil {
			t.Fatal(err)
		}
		r.SetCreationTime(time.Time{})
		edit(r)
		if _, err := st.Put(ctx, it.Key, Encode(r), it.Version); err == nil {
			return
		} else if !errors.Is(err, store.ErrConflict) {
			t.Fatal(err)
		}
	}
}

func getRoute(t *testing.T, st store.Store, ns, name string) *mesh.Route {
	t.Helper()
	return getMeshRoute(t, st, "default", ns, name)
}

// getMeshRoute reads route ns/name of mesh m from the store.
func getMeshRoute(t *testing.T, st store.Store, m, ns, name string) *mesh.Route {
	t.Helper()
	it, err := st.Get(context.Background(), routeKey(m, ns, name))
	if err != nil {
		t.Fatal(err)
	}
	r, err := DecodeRoute(it)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// eventually polls cond (generous timeout, for a loaded machine).
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	last := ""
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: never happened; last: %s", what, last)
}

func bindingsOf(t *testing.T, st store.Store) map[string]*mesh.RouteBinding {
	t.Helper()
	items, _, _, err := st.List(context.Background(), "default", mesh.KindRouteBinding, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*mesh.RouteBinding{}
	for _, it := range items {
		rs, err := mesh.Decode(it.Key.String(), it.Doc)
		if err != nil {
			t.Fatal(err)
		}
		b := rs[0].(*mesh.RouteBinding)
		out[b.RouteNamespace+"/"+b.RouteName] = b
	}
	return out
}

// scheduled reports whether the route is scheduled on router (any router when "") with a
// matching binding and nothing stale.
func scheduled(t *testing.T, st store.Store, ns, name, router string) (bool, string) {
	r := getRoute(t, st, ns, name)
	b := bindingsOf(t, st)[ns+"/"+name]
	s := r.Status
	switch {
	case s == nil || s.Phase != mesh.PhaseScheduled:
		return false, fmt.Sprintf("status %+v", s)
	case b == nil:
		return false, "no binding"
	case b.Router != s.Router || b.DNS != s.DNS:
		return false, fmt.Sprintf("binding %+v, status %+v", b, s)
	case router != "" && s.Router != router:
		return false, "on " + s.Router
	case len(s.Ingress) != 1 || s.Ingress[0].Router != s.Router:
		return false, fmt.Sprintf("ingress %+v", s.Ingress)
	}
	return true, ""
}

func TestReconcilerOnEtcd(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put(t, st, mesh.KindRouter, "shard1", routerDoc("shard1", "shard: '1'"))
	put(t, st, mesh.KindRouter, "shard2", routerDoc("shard2", "shard: '2'"))
	for i := range 6 {
		put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", fmt.Sprint("r", i)), routeDoc("shop", fmt.Sprint("r", i), fmt.Sprintf("h%d", i), "shard: '1'"))
	}
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("blog", "lonely"), routeDoc("blog", "lonely", "www", "shard: '9'"))
	m := &Metrics{}
	rc := &Reconciler{Store: st, Metrics: m, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond}
	go rc.Run(ctx)

	for i := range 6 {
		eventually(t, fmt.Sprint("r", i, " scheduled"), func() (bool, string) { return scheduled(t, st, "shop", fmt.Sprint("r", i), "shard1") })
	}
	if r := getRoute(t, st, "shop", "r0"); r.Status.DNS != "shop-h0.shard1.apps.example.com" || r.Status.RouterCanonicalHostname != "router-shard1.shard1.apps.example.com" || r.Status.Ingress[0].Conditions[0].Status != "True" || r.Status.Ingress[0].WildcardPolicy != mesh.WildcardNone {
		t.Errorf("r0 status %+v", r.Status)
	}
	// No router takes it: new, with the reason, counted.
	eventually(t, "lonely's reason", func() (bool, string) {
		r := getRoute(t, st, "blog", "lonely")
		return r.PhaseOf() == mesh.PhaseNew && r.Status != nil && r.Status.Reason == mesh.ReasonNoRouterMatches, fmt.Sprintf("%+v", r.Status)
	})
	if m.Failures()[mesh.ReasonNoRouterMatches] == 0 {
		t.Error("no NoRouterMatches failure counted")
	}
	// A catch-all router appears: the waiting route is scheduled (retried).
	put(t, st, mesh.KindRouter, "all", routerDoc("all", ""))
	eventually(t, "lonely scheduled on all", func() (bool, string) { return scheduled(t, st, "blog", "lonely", "all") })
	if r := getRoute(t, st, "blog", "lonely"); r.Status.Reason != "" || r.Status.Message != "" {
		t.Errorf("a stale reason stayed: %+v", r.Status)
	}

	// Relabelled off its shard: re-scheduled, nothing stale.
	updateRoute(t, st, "shop", "r0", func(r *mesh.Route) { r.SetLabels(map[string]string{"shard": "2"}) })
	// Its candidates are now all and shard2, neither holding a route of that set: the first
	// by name.
	eventually(t, "r0 moved off shard1", func() (bool, string) { return scheduled(t, st, "shop", "r0", "all") })
	if r := getRoute(t, st, "shop", "r0"); r.Status.DNS != "shop-h0.all.apps.example.com" || r.Status.Ingress[0].RouterCanonicalHostname != "router-all.all.apps.example.com" {
		t.Errorf("r0 after relabel: %+v", r.Status)
	}
	// Host change: the new name, bound again.
	updateRoute(t, st, "shop", "r1", func(r *mesh.Route) { r.Host = "renamed" })
	eventually(t, "r1 renamed", func() (bool, string) {
		ok, msg := scheduled(t, st, "shop", "r1", "")
		s := getRoute(t, st, "shop", "r1").Status
		return ok && s.DNS == "shop-renamed."+s.Router+".apps.example.com", fmt.Sprintf("%s %+v", msg, s)
	})
	// Router deleted: its routes go to the router left that takes them (the catch-all).
	if err := st.Delete(ctx, store.Key{Mesh: "default", Type: mesh.KindRouter, Name: "shard1"}, store.Any); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 6; i++ {
		eventually(t, fmt.Sprint("r", i, " on all"), func() (bool, string) { return scheduled(t, st, "shop", fmt.Sprint("r", i), "all") })
	}
	// A deleted route's binding goes too.
	if err := st.Delete(ctx, routeKey("default", "shop", "r5"), store.Any); err != nil {
		t.Fatal(err)
	}
	eventually(t, "r5's binding deleted", func() (bool, string) {
		_, ok := bindingsOf(t, st)["shop/r5"]
		return !ok, "still there"
	})
}

// Conflicts and displacement as status: the older route holds the host, the newer gets
// HostAlreadyClaimed naming it; when the holder leaves, the other is admitted.
func TestReconcilerAdmission(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put(t, st, mesh.KindRouter, "r1", routerDoc("r1", ""))
	put(t, st, mesh.KindRouter, "r2", routerDoc("r2", ""))
	user := func(ns, name string) string {
		return routeDoc(ns, name, "www.acme.test", "") + "dnsType: user\n"
	}
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("a", "first"), user("a", "first"))
	time.Sleep(5 * time.Millisecond) // distinct creation times (milliseconds)
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("b", "second"), user("b", "second"))
	rc := &Reconciler{Store: st, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, UserZones: []string{"acme.test"}}
	go rc.Run(ctx)
	admitted := func(ns, name string) (string, string) {
		r := getRoute(t, st, ns, name)
		if r.Status == nil || len(r.Status.Ingress) != 1 {
			return "", ""
		}
		c := r.Status.Ingress[0].Conditions[0]
		return c.Status + " " + c.Reason + " " + r.Status.Router, c.Message
	}
	eventually(t, "first admitted, second refused, both on one router", func() (bool, string) {
		a, _ := admitted("a", "first")
		b, msg := admitted("b", "second")
		router := strings.Fields(a + " x x")[1]
		return strings.HasPrefix(a, "True") && b == "False HostAlreadyClaimed "+router && strings.Contains(msg, "another namespace holds host www.acme.test"), a + " | " + b + " " + msg
	})
	if err := st.Delete(ctx, routeKey("default", "a", "first"), store.Any); err != nil {
		t.Fatal(err)
	}
	eventually(t, "second admitted once the holder left", func() (bool, string) {
		b, msg := admitted("b", "second")
		return strings.HasPrefix(b, "True"), b + msg
	})
}

// Two reconcilers at once (a leader and a stale one that has not noticed it lost): every
// route is bound exactly once and its status is its binding.
func TestTwoReconcilersBindOnce(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []string{"a", "b", "c"} {
		put(t, st, mesh.KindRouter, n, routerDoc(n, ""))
	}
	const n = 60
	for i := range n {
		put(t, st, mesh.KindRoute, mesh.RouteKeyName("ns", fmt.Sprint("r", i)), routeDoc("ns", fmt.Sprint("r", i), fmt.Sprint("h", i), ""))
	}
	for range 2 {
		rc := &Reconciler{Store: st, Resync: 100 * time.Millisecond, Backoff: 10 * time.Millisecond}
		go rc.Run(ctx)
	}
	eventually(t, "all bound", func() (bool, string) {
		bs := bindingsOf(t, st)
		return len(bs) == n, fmt.Sprint(len(bs), " bindings")
	})
	cancel()
	load := map[string]int{}
	for i := range n {
		if ok, msg := scheduled(t, st, "ns", fmt.Sprint("r", i), ""); !ok {
			t.Errorf("r%d: %s", i, msg)
		}
		load[getRoute(t, st, "ns", fmt.Sprint("r", i)).Status.Router]++
	}
	lo, hi := n, 0
	for _, l := range load {
		lo, hi = min(lo, l), max(hi, l)
	}
	if len(load) != 3 || hi-lo > 1 {
		t.Errorf("spread %v: not round-robin within one", load)
	}
}

// An older route that arrives on the router later (relabelled onto it) displaces the newer
// holder of its host: the holder's status turns HostAlreadyClaimed naming the older route.
func TestReconcilerDisplacement(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put(t, st, mesh.KindRouter, "r", routerDoc("r", "team: t"))
	user := func(ns, name, team string) string {
		return routeDoc(ns, name, "www.acme.test", "team: "+team) + "dnsType: user\n"
	}
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("a", "older"), user("a", "older", "none"))
	time.Sleep(5 * time.Millisecond)
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("a", "newer"), user("a", "newer", "t"))
	rc := &Reconciler{Store: st, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, UserZones: []string{"acme.test"}}
	go rc.Run(ctx)
	cond := func(name string) string {
		r := getRoute(t, st, "a", name)
		if r.Status == nil || len(r.Status.Ingress) == 0 {
			return ""
		}
		c := r.Status.Ingress[0].Conditions[0]
		return c.Status + " " + c.Reason + " " + c.Message
	}
	eventually(t, "the newer route holds the host", func() (bool, string) {
		return strings.HasPrefix(cond("newer"), "True"), cond("newer")
	})
	updateRoute(t, st, "a", "older", func(r *mesh.Route) { r.SetLabels(map[string]string{"team": "t"}) })
	eventually(t, "the older route displaces it", func() (bool, string) {
		o, n := cond("older"), cond("newer")
		return strings.HasPrefix(o, "True") && n == "False HostAlreadyClaimed route a/older has host www.acme.test and is older", o + " | " + n
	})
}
