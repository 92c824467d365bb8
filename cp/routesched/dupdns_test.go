package routesched

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/shardzones"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/mesh"
)

// seedBound writes n system routes (namespace ns, hosts h0...) already bound to router,
// each with its binding and the status the reconciler would write, in one transaction per
// route, several at once (as a reconciler would have left them).
func seedBound(t *testing.T, st store.Transactional, router *mesh.Router, ns string, n int) {
	t.Helper()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				r := &mesh.Route{Meta: mesh.Meta{Name: fmt.Sprint("r", i)}, Namespace: ns, Host: fmt.Sprint("h", i), To: mesh.RouteTarget{Service: "web", Port: 80}}
				dns, err := routing.FinalDNS(r, router)
				if err != nil {
					errs <- err
					return
				}
				r.Status = &mesh.RouteStatus{Phase: mesh.PhaseScheduled, DNS: dns, Router: router.Name, RouterCanonicalHostname: Canonical(router),
					Ingress: Ingress(router, r, routing.Admission{Admitted: true, Host: dns}, time.Now())}
				b := &mesh.RouteBinding{Meta: mesh.Meta{Name: mesh.RouteKeyName(ns, r.Name)}, RouteNamespace: ns, RouteName: r.Name, Router: router.Name, DNS: dns}
				if err := st.Txn(ctx, store.Write{Key: routeKey("default", ns, r.Name), Doc: Encode(r)}, store.Write{Key: bindingKey("default", ns, r.Name), Doc: Encode(b)}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

var quiet = slog.New(slog.DiscardHandler)

func pass(t *testing.T, rc *Reconciler) time.Time {
	t.Helper()
	_, next, err := rc.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return next
}

func routerStatus(t *testing.T, st store.Store, name string) *mesh.RouterStatus {
	t.Helper()
	it, err := st.Get(context.Background(), store.Key{Mesh: "default", Type: mesh.KindRouter, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := mesh.Decode(it.Key.String(), it.Doc)
	if err != nil {
		t.Fatal(err)
	}
	return rs[0].(*mesh.Router).Status
}

// A router created with the dns of a router that serves ~10,000 routes: the older router
// keeps its dns, its zone (asked with real packets of the control plane's DNS, built from the
// store as kuma-cp builds it) and every binding; the newcomer is the one in conflict, with a
// condition naming the holder, and takes no routes; deleting it changes nothing. The first
// router by name used to win, so the scheduler unbound every route of the older one (and
// went on unbinding from its old snapshot after the newcomer was deleted).
func TestRouterReusingADNSNeverTakesItsZone(t *testing.T) {
	const n = 10000
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	holder := &mesh.Router{Meta: mesh.Meta{Name: "shard-b"}, DNS: "shard-b.apps.example.com"}
	put(t, st, mesh.KindRouter, "shard-b", "type: Router\nname: shard-b\ndns: shard-b.apps.example.com\ndataplanes: {kuma.io/service: gw-b}\n")
	put(t, st, mesh.KindDataplane, "gw-b-1", gateway("gw-b-1", "10.2.0.1", "gw-b"))
	put(t, st, mesh.KindDataplane, "gw-dup-1", gateway("gw-dup-1", "10.9.9.9", "gw-dup"))
	time.Sleep(5 * time.Millisecond) // distinct creation times (milliseconds)
	seedBound(t, st, holder, "shop", n)
	srv, ask := shardDNS(ctx, t, st)
	// shardB: once the zones are rebuilt after what was written since last, shard-b's
	// replica answers its routes' names at the listener
	const name = "shop-h1.shard-b.apps.example.com."
	eventually(t, "the zones served at first", func() (bool, string) { return len(ask(name).Answer) == 1, "not yet" })
	built := srv.Catalog()
	shardB := func(when string) {
		t.Helper()
		eventually(t, "the zones rebuilt "+when, func() (bool, string) { return srv.Catalog() != built, "not yet" })
		built = srv.Catalog()
		if m := ask(name); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.2.0.1" {
			t.Errorf("%s: shop/h1's name answered %v, want shard-b's replica 10.2.0.1", when, m)
		}
	}
	if m := ask(name); m.Answer[0].(*dns.A).A.String() != "10.2.0.1" {
		t.Fatalf("at first: %v", m)
	}
	m := &Metrics{}
	rc := &Reconciler{Store: st, Metrics: m, Log: quiet}
	pass(t, rc)
	if got := len(bindingsOf(t, st)); got != n || m.Rescheduled.Load() != 0 {
		t.Fatalf("before the newcomer: %d bindings, %d unbound", got, m.Rescheduled.Load())
	}

	put(t, st, mesh.KindRouter, "dup-a", "type: Router\nname: dup-a\ndns: shard-b.apps.example.com\ndataplanes: {kuma.io/service: gw-dup}\n")
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("blog", "new"), routeDoc("blog", "new", "new", ""))
	pass(t, rc)
	pass(t, rc) // the newcomer's status written by the first is read back
	if got := len(bindingsOf(t, st)); got != n+1 || m.Rescheduled.Load() != 0 {
		t.Errorf("with the newcomer: %d bindings (want %d), %d unbound", got, n+1, m.Rescheduled.Load())
	}
	if ok, msg := scheduled(t, st, "blog", "new", "shard-b"); !ok {
		t.Errorf("a new route with the newcomer there: %s", msg)
	}
	s := routerStatus(t, st, "dup-a")
	if s == nil || len(s.Conditions) != 1 || s.Conditions[0].Reason != ReasonDNSInUse || !strings.Contains(s.Conditions[0].Message, "default/shard-b") {
		t.Errorf("the newcomer's status %+v: want a %s condition naming default/shard-b", s, ReasonDNSInUse)
	}
	if s := routerStatus(t, st, "shard-b"); s != nil {
		t.Errorf("the holder's status %+v: want none", s)
	}
	shardB("with the newcomer")

	if err := st.Delete(ctx, store.Key{Mesh: "default", Type: mesh.KindRouter, Name: "dup-a"}, store.Any); err != nil {
		t.Fatal(err)
	}
	pass(t, rc)
	if got := len(bindingsOf(t, st)); got != n+1 || m.Rescheduled.Load() != 0 {
		t.Errorf("after the newcomer is deleted: %d bindings (want %d), %d unbound", got, n+1, m.Rescheduled.Load())
	}
	shardB("after the newcomer is deleted")
}

func gateway(name, ip, svc string) string {
	return "type: Dataplane\nname: " + name + "\nnetworking:\n  address: " + ip + "\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: " + svc + "}\n"
}

// shardDNS runs the control plane's DNS on the store's zones, as kuma-cp does (a real
// listener on a free port), and returns it and a function asking it for a name's A records.
func shardDNS(ctx context.Context, t *testing.T, st store.Store) (*authdns.Server, func(name string) *dns.Msg) {
	t.Helper()
	srv, err := authdns.New(authdns.Config{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Run(ctx)
	go shardzones.Run(ctx, st, authdns.Input{}, nil, quiet, func(z *shardzones.Zones) { srv.Swap(z.All) })
	udp, _ := srv.Addrs()
	return srv, func(name string) *dns.Msg {
		req := new(dns.Msg)
		req.SetQuestion(name, dns.TypeA)
		m, _, err := (&dns.Client{Timeout: 2 * time.Second}).Exchange(req, udp.String())
		if err != nil {
			return &dns.Msg{}
		}
		return m
	}
}

// txnHook runs before once, at the first transaction.
type txnHook struct {
	store.Transactional
	once   sync.Once
	before func()
}

func (h *txnHook) Txn(ctx context.Context, ws ...store.Write) error {
	h.once.Do(h.before)
	return h.Transactional.Txn(ctx, ws...)
}

// A pass never acts on a snapshot older than the store it writes to: the router whose
// deletion it read comes back before its first unbinding lands, and no binding is undone
// (each is checked on the router as read). It used to re-read only the route and unbind
// every one.
func TestUnbindingChecksWhatThePassRead(t *testing.T) {
	c := etcdtest.Start(t, 3)
	st := store.NewEtcd(c.Client(), "/kuma")
	ctx := context.Background()
	const doc = "type: Router\nname: a\ndns: a.apps.example.com\n"
	put(t, st, mesh.KindRouter, "a", doc)
	seedBound(t, st, &mesh.Router{Meta: mesh.Meta{Name: "a"}, DNS: "a.apps.example.com"}, "shop", 10)
	if err := st.Delete(ctx, store.Key{Mesh: "default", Type: mesh.KindRouter, Name: "a"}, store.Any); err != nil {
		t.Fatal(err)
	}
	c.Kill(0) // a member down, quorum kept: the checks hold on the members left
	m := &Metrics{}
	rc := &Reconciler{Store: &txnHook{Transactional: st, before: func() { put(t, st, mesh.KindRouter, "a", doc) }}, Metrics: m, Log: quiet}
	next := pass(t, rc)
	if got := len(bindingsOf(t, st)); got != 10 || m.Rescheduled.Load() != 0 {
		t.Errorf("%d bindings left, %d unbound: the pass acted on a router deleted and back since it read it", got, m.Rescheduled.Load())
	}
	if next.IsZero() || time.Until(next) > time.Second {
		t.Errorf("next pass at %v: want one at once", next)
	}
	c.Restart(0)
	pass(t, rc)
	if got := len(bindingsOf(t, st)); got != 10 || m.Rescheduled.Load() != 0 {
		t.Errorf("the next pass: %d bindings, %d unbound", got, m.Rescheduled.Load())
	}
}

// A change that would take most of a router's routes at once (here its selector) is logged
// and done in steps of MassUnbindMin (or a tenth) a pass, and stops once it is reverted.
func TestMassUnbindingIsSlowed(t *testing.T) {
	const n = 3 * MassUnbindMin
	st := newStore(t)
	put(t, st, mesh.KindRouter, "a", routerDoc("a", ""))
	seedBound(t, st, &mesh.Router{Meta: mesh.Meta{Name: "a"}, DNS: "a.apps.example.com"}, "shop", n)
	m := &Metrics{}
	rc := &Reconciler{Store: st, Metrics: m, Log: quiet}
	pass(t, rc)
	put(t, st, mesh.KindRouter, "a", routerDoc("a", "team: x"))
	start := time.Now()
	next := pass(t, rc)
	if got := len(bindingsOf(t, st)); got != n-MassUnbindMin || m.MassUnbindSlowed.Load() != 1 {
		t.Fatalf("%d bindings left after one pass (want %d), slowed %d times", got, n-MassUnbindMin, m.MassUnbindSlowed.Load())
	}
	if d := next.Sub(start); d <= 0 || d > time.Since(start)+MassUnbindPause {
		t.Errorf("the next step %v after the pass began, want one within %v of its end", d, MassUnbindPause)
	}
	put(t, st, mesh.KindRouter, "a", routerDoc("a", ""))
	pass(t, rc)
	if got := len(bindingsOf(t, st)); got != n || m.Rescheduled.Load() != MassUnbindMin {
		t.Errorf("after the selector is reverted: %d bindings (want all %d: the rest kept, the unbound bound again), %d unbound in all (want %d)", got, n, m.Rescheduled.Load(), MassUnbindMin)
	}
}

// A route stored under a key that is not its name.namespace (written to the store past the
// API) is left alone: its binding and every write of the binding path name the route by
// name.namespace, so undoing its status (checked on the key read) would leave it unbound for
// good - it used to be "unbound" on every pass (the binding path found no route there).
func TestRouteUnderAnotherKeyLeftAlone(t *testing.T) {
	st := newStore(t)
	put(t, st, mesh.KindRouter, "shard1", routerDoc("shard1", ""))
	doc := routeDoc("acme", "shop", "www", "") + "status: {phase: scheduled, router: shard1, dns: acme-www.shard1.apps.example.com}\n"
	put(t, st, mesh.KindRoute, "shop", doc)
	m := &Metrics{}
	rc := &Reconciler{Store: st, Metrics: m, Log: quiet}
	pass(t, rc)
	pass(t, rc)
	it, err := st.Get(context.Background(), store.Key{Mesh: "default", Type: mesh.KindRoute, Name: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if string(it.Doc) != doc || m.Rescheduled.Load() != 0 || len(bindingsOf(t, st)) != 0 {
		t.Errorf("the route under another key: %s, %d unbound, %d bindings", it.Doc, m.Rescheduled.Load(), len(bindingsOf(t, st)))
	}
}

// A DNS condition written with the router (forged) is replaced by what the scheduler finds
// (here none: its dns is its own).
func TestRouterStatusIsTheSchedulers(t *testing.T) {
	st := newStore(t)
	put(t, st, mesh.KindRouter, "a", routerDoc("a", "")+"status:\n  conditions: [{type: DNS, status: 'False', reason: RouterDNSInUse, message: forged}]\n")
	rc := &Reconciler{Store: st, Metrics: &Metrics{}, Log: quiet}
	pass(t, rc)
	if s := routerStatus(t, st, "a"); s.Condition(ConditionDNS) != nil {
		t.Errorf("the forged condition stayed: %+v", s)
	}
}

// The scheduler writes only its DNS condition: the rest of a router's status (its replicas
// and their conditions, the router status writer's) is kept.
func TestDNSConditionKeepsTheReplicasStatus(t *testing.T) {
	st := newStore(t)
	put(t, st, mesh.KindRouter, "a", routerDoc("a", ""))
	time.Sleep(5 * time.Millisecond)
	put(t, st, mesh.KindRouter, "b", "type: Router\nname: b\ndns: a.apps.example.com\nstatus:\n  desiredReplicas: 2\n  readyReplicas: 1\n  replicas: [{name: gw-1, address: 10.0.0.1, ready: true}]\n  conditions: [{type: Available, status: 'True', reason: ReplicasReady, message: 1 of 2}]\n")
	rc := &Reconciler{Store: st, Metrics: &Metrics{}, Log: quiet}
	pass(t, rc)
	s := routerStatus(t, st, "b")
	if s == nil || s.ReadyReplicas != 1 || len(s.Replicas) != 1 || s.Condition(mesh.ConditionAvailable) == nil ||
		s.Condition(ConditionDNS) == nil || !strings.Contains(s.Condition(ConditionDNS).Message, "default/a") {
		t.Errorf("b's status %+v: want its replicas and Available kept, and the DNS condition naming default/a", s)
	}
}
