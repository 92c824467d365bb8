package routesched

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// A pass on a watched change visits only what the change can affect; it must decide as a
// pass that checks everything. A random sequence of writes - routes created, edited (host,
// labels, path, dns type, wildcard) and deleted, routers' selectors and admission policies
// changed, routers' status changed, routers added and deleted, bindings removed - is followed by a reconciler running
// passes on its watch only; every few writes, a new reconciler's full pass over the same
// store must find every binding, route status and router status as they are (it writes
// nothing).
func TestIncrementalPassDecidesAsFull(t *testing.T) {
	for _, seed := range []uint64{7, 22, 24, 102} {
		t.Run(fmt.Sprint("seed ", seed), func(t *testing.T) { incrementalAgainstFull(t, seed) })
	}
}

func incrementalAgainstFull(t *testing.T, seed uint64) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rnd := rand.New(rand.NewPCG(seed, 11))
	w := &writer{t: t, st: st, rnd: rnd}
	for _, n := range []string{"shard-a", "shard-b", "catch-all"} {
		w.router(n)
	}
	for range 25 {
		w.route()
	}
	w.otherMesh(true)
	rc := &Reconciler{Store: st, Log: quiet, Backoff: time.Nanosecond, UserZones: []string{"acme.test"}}
	rev, _, err := rc.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{t: t, rc: rc, st: st, events: st.Watch(ctx, rev), seen: rev, slices: rand.New(rand.NewPCG(seed, 13))}
	f.settle(ctx)
	incremental := 0
	for step := range 120 {
		switch n := rnd.IntN(20); {
		case n < 2:
			w.router(fmt.Sprint("shard-", string(rune('a'+rnd.IntN(4)))))
		case n < 3:
			w.deleteOne(mesh.KindRouter)
		case n < 4 && step%2 == 0:
			w.routerStatus()
		case n < 4:
			w.deleteOne(mesh.KindRouteBinding)
		case n < 7:
			w.deleteOne(mesh.KindRoute)
		case n < 11:
			w.route()
		case n < 12:
			w.otherMesh(false)
		default:
			w.editRoute()
		}
		incremental += f.settle(ctx)
		if step%10 == 9 {
			before := snapshot(t, st)
			full := &Reconciler{Store: st, Log: quiet, UserZones: rc.UserZones}
			if _, _, err := full.Pass(ctx); err != nil {
				t.Fatal(err)
			}
			if diff := diffSnapshots(before, snapshot(t, st)); diff != "" {
				t.Fatalf("after step %d, a full pass changed what the incremental passes left:\n%s", step, diff)
			}
			f.settle(ctx) // (nothing: the full pass wrote nothing)
		}
	}
	if incremental == 0 {
		t.Fatal("no pass on a watched change visited only the changes")
	}
	t.Logf("%d passes on the changes only", incremental)
}

// writer makes the random writes: a user's, through the store's compare-and-set, keeping a
// route's stored status as the API does.
type writer struct {
	t   *testing.T
	st  store.Store
	rnd *rand.Rand
}

func (w *writer) pick(from ...string) string { return from[w.rnd.IntN(len(from))] }

// router writes router name, with a random selector and admission policy.
func (w *writer) router(name string) {
	doc := routerDoc(name, w.pick("", "shard: a", "shard: b")) +
		"routeAdmission: {namespaceOwnership: " + w.pick("Strict", "InterNamespaceAllowed") + ", wildcardPolicy: " + w.pick("WildcardsAllowed", "WildcardsDisallowed") + "}\n"
	put(w.t, w.st, mesh.KindRouter, name, doc)
}

// routerStatus changes a router's status (its replicas' readiness, as the leader writes
// it), nothing else.
func (w *writer) routerStatus() {
	items := w.list(mesh.KindRouter)
	if len(items) == 0 {
		return
	}
	it := items[w.rnd.IntN(len(items))]
	rs, err := mesh.Decode(it.Key.String(), it.Doc)
	if err != nil {
		w.t.Fatal(err)
	}
	rt := rs[0].(*mesh.Router)
	if rt.Status == nil {
		rt.Status = &mesh.RouterStatus{}
	}
	rt.Status.DesiredReplicas, rt.Status.ReadyReplicas = 2, w.rnd.IntN(3)
	if _, err := w.st.Put(context.Background(), it.Key, Encode(rt), it.Version); err != nil && !errors.Is(err, store.ErrConflict) {
		w.t.Fatal(err)
	}
}

// route writes one of 40 routes (namespace and name), new or over the stored one.
func (w *writer) route() {
	ns, name := w.pick("shop", "blog", "evil"), fmt.Sprint("r", w.rnd.IntN(15))
	doc := routeDoc(ns, name, w.pick("www", "api", "x"), w.pick("", "shard: a", "shard: b"))
	put(w.t, w.st, mesh.KindRoute, mesh.RouteKeyName(ns, name), doc)
}

// otherMesh writes, in mesh other, its router (first) or one of 3 user routes on names
// the default mesh's routes take too (one DNS name leads to one router, of one mesh).
func (w *writer) otherMesh(first bool) {
	k := store.Key{Mesh: "other", Type: mesh.KindRouter, Name: "other"}
	doc := routerDoc("other", "")
	if !first {
		ns, name := "shop", fmt.Sprint("o", w.rnd.IntN(3))
		k = store.Key{Mesh: "other", Type: mesh.KindRoute, Name: mesh.RouteKeyName(ns, name)}
		doc = routeDoc(ns, name, w.pick("www.acme.test", "api.acme.test"), "") + "dnsType: user\n"
	}
	if _, err := w.st.Put(context.Background(), k, []byte(doc), store.Any); err != nil {
		w.t.Fatal(err)
	}
}

// editRoute changes a stored route, keeping its status.
func (w *writer) editRoute() {
	items := w.list(mesh.KindRoute)
	if len(items) == 0 {
		return
	}
	it := items[w.rnd.IntN(len(items))]
	r, err := DecodeRoute(it)
	if err != nil {
		w.t.Fatal(err)
	}
	r.SetCreationTime(time.Time{})
	switch w.rnd.IntN(4) {
	case 0:
		r.SetLabels(map[string]string{"shard": w.pick("a", "b")})
	case 1:
		r.Path = w.pick("", "/cart", "/api")
	case 2:
		r.DNSType, r.WildcardPolicy = mesh.DNSTypeUser, ""
		r.Host = w.pick("www.acme.test", "api.acme.test", "a.www.acme.test", "x.shard-a.apps.example.com")
		if w.rnd.IntN(3) == 0 {
			r.WildcardPolicy = mesh.WildcardSubdomain
		}
	default:
		r.DNSType, r.WildcardPolicy, r.Host = mesh.DNSTypeSystem, "", w.pick("www", "api")
	}
	if _, err := w.st.Put(context.Background(), it.Key, Encode(r), it.Version); err != nil && !errors.Is(err, store.ErrConflict) {
		w.t.Fatal(err)
	}
}

func (w *writer) deleteOne(kind string) {
	items := w.list(kind)
	if len(items) == 0 {
		return
	}
	if err := w.st.Delete(context.Background(), items[w.rnd.IntN(len(items))].Key, store.Any); err != nil {
		w.t.Fatal(err)
	}
}

func (w *writer) list(kind string) []store.Item {
	items, _, _, err := w.st.List(context.Background(), "default", kind, "", 0)
	if err != nil {
		w.t.Fatal(err)
	}
	slices.SortFunc(items, func(a, b store.Item) int { return strings.Compare(a.Name, b.Name) })
	return items
}

// follower runs the reconciler's passes on its watch, as its leader loop does.
type follower struct {
	t      *testing.T
	rc     *Reconciler
	st     store.Store
	events <-chan store.Event
	seen   int64
	slices *rand.Rand // when set, a pass in four also checks a random slice (as every second)
}

// settle applies the watch up to the store's revision and runs passes on the mirror until
// one writes nothing; it returns how many of them visited only the changes. A route that
// failed is retried at the next pass (as by a new reconciler: the backoff is timing, not a
// decision).
func (f *follower) settle(ctx context.Context) int {
	only := 0
	for range 50 {
		partial := f.slices != nil && f.slices.IntN(3) == 0
		if partial { // a pass on part of what the watch has to show, as the debounce may run it
			f.applySome(f.slices.IntN(4))
		} else {
			f.catchUp(ctx)
		}
		before := f.rev(ctx)
		if f.rc.canPassDirty(f.rc.mirror.dirty) {
			only++
		}
		clear(f.rc.retries)
		slice := -1
		if f.slices != nil && f.slices.IntN(4) == 0 {
			slice = f.slices.IntN(checkSlices)
		}
		if _, err := f.rc.passOnMirror(ctx, false, slice); err != nil {
			f.t.Fatal(err)
		}
		if !partial && f.rev(ctx) == before {
			return only
		}
	}
	f.t.Fatal("the passes never settled")
	return only
}

// applySome applies at most n of the watch's events that arrive within a few milliseconds.
func (f *follower) applySome(n int) {
	for range n {
		select {
		case e := <-f.events:
			f.rc.mirror.apply(e)
			f.seen = max(f.seen, e.Revision)
		case <-time.After(5 * time.Millisecond):
			return
		}
	}
}

// catchUp applies the watch's events until the mirror holds the store's revision (every
// event of a transaction: those that follow at once too).
func (f *follower) catchUp(ctx context.Context) {
	want := f.rev(ctx)
	for {
		wait := 10 * time.Second
		if f.seen >= want {
			wait = 10 * time.Millisecond
		}
		select {
		case e := <-f.events:
			if e.Type == store.Relist {
				f.t.Fatal("the watch asks for a relist")
			}
			f.rc.mirror.apply(e)
			f.seen = max(f.seen, e.Revision)
		case <-time.After(wait):
			if f.seen < want {
				f.t.Fatalf("the watch is at revision %d, the store at %d", f.seen, want)
			}
			return
		}
	}
}

func (f *follower) rev(ctx context.Context) int64 {
	_, _, rev, err := f.st.List(ctx, "default", mesh.KindRouter, "", 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return rev
}

// snapshot is every router, route and binding document by key.
func snapshot(t *testing.T, st store.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, kind := range []string{mesh.KindRouter, mesh.KindRoute, mesh.KindRouteBinding} {
		items, _, _, err := st.List(context.Background(), "", kind, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			out[it.Key.String()] = string(it.Doc)
		}
	}
	return out
}

func diffSnapshots(a, b map[string]string) string {
	var out []string
	for k, v := range a {
		if w, ok := b[k]; !ok {
			out = append(out, fmt.Sprintf("%s: deleted, was %s", k, v))
		} else if w != v {
			out = append(out, fmt.Sprintf("%s:\n  incremental %s\n  full        %s", k, v, w))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			out = append(out, fmt.Sprintf("%s: created, %s", k, v))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// The pass every Resync checks a tenth of the bindings kept again from scratch: a binding
// the passes on the changes keep without a check (here, kept as if checked at a version
// whose status a writer broke) is found and repaired within checkSlices slices.
func TestResyncSlicesCheckWhatPassesKeep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, rc, f := settledShard(ctx, t, 30)

	updateRoute(t, st, "shop", "r7", func(r *mesh.Route) {
		r.Status.Ingress[0].Conditions[0].Status, r.Status.Ingress[0].Conditions[0].Reason = "False", "Broken"
	})
	f.catchUp(ctx)
	ms, name := rc.meshes["default"], mesh.RouteKeyName("shop", "r7")
	k := ms.kept[name]
	k.route = rc.mirror.items[routeKey("default", "shop", "r7")].Version // kept as if checked
	ms.kept[name] = k
	delete(rc.mirror.dirty, routeKey("default", "shop", "r7"))
	for range 3 {
		f.settle(ctx)
	}
	if !brokenAdmission(t, st) {
		t.Fatal("the corruption did not hold: the test checks nothing")
	}
	for slice := range checkSlices {
		f.catchUp(ctx)
		if _, err := rc.passOnMirror(ctx, false, slice); err != nil {
			t.Fatal(err)
		}
	}
	if brokenAdmission(t, st) {
		t.Fatalf("after %d slices, shop/r7's status is still %+v", checkSlices, getRoute(t, st, "shop", "r7").Status)
	}
}

func brokenAdmission(t *testing.T, st store.Store) bool {
	r := getRoute(t, st, "shop", "r7")
	return r.Status.Ingress[0].Conditions[0].Reason == "Broken"
}

// The listing read beside the passes every checkSlices slices repairs what the watch did
// not show (here, events dropped: a route created, a binding deleted): the next pass acts
// on it. Nothing else is taken for a change: a healthy watch's mirror matches the listing,
// and a key deleted while the listing was read stays deleted.
func TestRelistRepairsWhatTheWatchMissed(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, rc, f := settledShard(ctx, t, 10)
	if n := rc.mirror.repair(<-rc.relist(ctx)); n != 0 {
		t.Fatalf("a healthy watch, yet %d changes repaired", n)
	}

	// Missed: a new route, a binding deleted.
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", "late"), routeDoc("shop", "late", "late", ""))
	if err := st.Delete(ctx, bindingKey("default", "shop", "r3"), store.Any); err != nil {
		t.Fatal(err)
	}
	f.drop(ctx)
	listed := rc.relist(ctx)
	l := <-listed
	// Deleted while the listing was read: applied by the watch, not brought back.
	if err := st.Delete(ctx, routeKey("default", "shop", "r5"), store.Any); err != nil {
		t.Fatal(err)
	}
	f.catchUp(ctx)
	if n := rc.mirror.repair(l); n != 2 {
		t.Errorf("%d changes repaired, want 2 (the route created, the binding deleted)", n)
	}
	if _, ok := rc.mirror.items[routeKey("default", "shop", "r5")]; ok {
		t.Error("a route deleted while the listing was read is back in the mirror")
	}
	f.settle(ctx)
	for _, name := range []string{"late", "r3"} {
		if ok, why := scheduled(t, st, "shop", name, "shard-a"); !ok {
			t.Errorf("shop/%s: %s", name, why)
		}
	}
}

// drop reads the watch's events up to the store's revision without applying them: the
// mirror misses them.
func (f *follower) drop(ctx context.Context) {
	want := f.rev(ctx)
	for f.seen < want {
		select {
		case e := <-f.events:
			f.seen = max(f.seen, e.Revision)
		case <-time.After(10 * time.Second):
			f.t.Fatalf("the watch is at revision %d, the store at %d", f.seen, want)
		}
	}
	time.Sleep(20 * time.Millisecond)
	for {
		select {
		case <-f.events:
			continue
		default:
		}
		return
	}
}

// settledShard is a store with one router and n routes (shop/r0...), and a reconciler that
// bound them, following the store with its passes settled.
func settledShard(ctx context.Context, t *testing.T, n int) (*store.Etcd, *Reconciler, *follower) {
	st := newStore(t)
	put(t, st, mesh.KindRouter, "shard-a", routerDoc("shard-a", ""))
	for i := range n {
		put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", fmt.Sprint("r", i)), routeDoc("shop", fmt.Sprint("r", i), fmt.Sprint("h", i), ""))
	}
	rc := &Reconciler{Store: st, Log: quiet}
	rev, _, err := rc.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{t: t, rc: rc, st: st, events: st.Watch(ctx, rev), seen: rev}
	f.settle(ctx)
	return st, rc, f
}

// A user route kept unchanged is still checked at each pass against the other meshes'
// routes: when an older route of another mesh turns out bound on its name (written by a
// leader before, say), the passes on the changes undo the newer one, as a full pass does.
func TestKeptUserRouteYieldsToAnotherMeshsOlderBinding(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inMesh := func(m, kind, name, doc string) { putInMesh(t, st, m, kind, name, doc) }
	inMesh("m2", mesh.KindRoute, mesh.RouteKeyName("blog", "www"), routeDoc("blog", "www", "www.acme.test", "")+"dnsType: user\n") // older, no router yet
	inMesh("m1", mesh.KindRouter, "z-shard", routerDoc("z-shard", ""))
	inMesh("m1", mesh.KindRoute, mesh.RouteKeyName("shop", "www"), routeDoc("shop", "www", "www.acme.test", "")+"dnsType: user\n")
	rc := &Reconciler{Store: st, Log: quiet, Backoff: time.Nanosecond, UserZones: []string{"acme.test"}}
	rev, _, err := rc.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{t: t, rc: rc, st: st, events: st.Watch(ctx, rev), seen: rev}
	f.settle(ctx)
	inMesh("m2", mesh.KindRouter, "a-shard", routerDoc("a-shard", "")) // m2's route: its name is m1's
	f.settle(ctx)
	if r := getMeshRoute(t, st, "m1", "shop", "www"); r.PhaseOf() != mesh.PhaseScheduled {
		t.Fatalf("m1's route: %+v", r.Status)
	}
	if r := getMeshRoute(t, st, "m2", "blog", "www"); r.PhaseOf() == mesh.PhaseScheduled {
		t.Fatalf("m2's route: %+v", r.Status)
	}
	// m2's older route bound as a leader before would have (its binding and its status).
	it, err := st.Get(ctx, routeKey("m2", "blog", "www"))
	if err != nil {
		t.Fatal(err)
	}
	r, _ := DecodeRoute(it)
	r.SetCreationTime(time.Time{})
	r.Status = &mesh.RouteStatus{Phase: mesh.PhaseScheduled, DNS: "www.acme.test", Router: "a-shard"}
	b := &mesh.RouteBinding{Meta: mesh.Meta{Mesh: "m2", Name: mesh.RouteKeyName("blog", "www")}, RouteNamespace: "blog", RouteName: "www", Router: "a-shard", DNS: "www.acme.test"}
	if err := st.Txn(ctx, store.Write{Key: bindingKey("m2", "blog", "www"), Doc: Encode(b)}, store.Write{Key: it.Key, Doc: Encode(r), Expect: it.Version, Created: it.Created}); err != nil {
		t.Fatal(err)
	}
	f.settle(ctx)
	if r := getMeshRoute(t, st, "m1", "shop", "www"); r.PhaseOf() == mesh.PhaseScheduled || r.Status.Reason != mesh.ReasonHostAlreadyClaimed {
		t.Errorf("m1's newer route, its name bound in m2 to an older route: %+v", r.Status)
	}
}

// A router whose status alone changed (its replicas' readiness, written by the leader as
// they come and go) leaves every decision as it was: the pass on it visits the changes
// only. A change of its spec is a pass that checks everything.
func TestRouterStatusIsNoFullPass(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, rc, f := settledShard(ctx, t, 5)
	w := &writer{t: t, st: st, rnd: rand.New(rand.NewPCG(1, 2))}
	w.routerStatus()
	f.catchUp(ctx)
	if !rc.canPassDirty(rc.mirror.dirty) {
		t.Error("a router's status changed: a pass that checks everything")
	}
	f.settle(ctx)
	put(t, st, mesh.KindRouter, "shard-a", routerDoc("shard-a", "shard: a"))
	f.catchUp(ctx)
	if rc.canPassDirty(rc.mirror.dirty) {
		t.Error("a router's selector changed: a pass on the changes only")
	}
}

// The routes a pass bound come back through the watch as it wrote them (the route and its
// binding): they are kept at the versions shown, with no visit - the pass after 10,000
// bindings has nothing of them to do - and stay bound as a pass that checks everything finds
// them.
func TestBoundRoutesComeBackWithoutAVisit(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, rc, f := settledShard(ctx, t, 0)
	const n = 20
	for i := range n {
		put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", fmt.Sprint("r", i)), routeDoc("shop", fmt.Sprint("r", i), fmt.Sprint("h", i), ""))
	}
	f.catchUp(ctx)
	if _, err := rc.passOnMirror(ctx, false, -1); err != nil {
		t.Fatal(err)
	}
	f.catchUp(ctx) // the echoes of the bindings written
	echoes := 0
	for k := range rc.mirror.dirty {
		if k.Type == mesh.KindRoute {
			echoes++
		}
	}
	if echoes != n {
		t.Fatalf("%d routes shown back by the watch, want the %d bound", echoes, n)
	}
	left := rc.absorbEchoes(rc.mirror.takeDirty())
	for k := range left {
		t.Errorf("%s shown back as this reconciler wrote it, and visited again", k)
	}
	f.settle(ctx)
	for _, it := range (&writer{t: t, st: st}).list(mesh.KindRoute) {
		if r, err := DecodeRoute(it); err != nil || r.PhaseOf() != mesh.PhaseScheduled || !r.Admitted() {
			t.Errorf("route %s after the echoes: %+v (%v), want it scheduled and admitted", it.Name, r.Status, err)
		}
	}
}
