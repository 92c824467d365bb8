package routesched

import (
	"context"
	"fmt"
	"github.com/kumadp/kuma-dp/cp/store"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/shardzones"
	"github.com/kumadp/kuma-dp/mesh"
)

// A user-domain route whose host lies in another router's zone - a shard's system name, or
// a wildcard over a shard's own zone - is never served by a router other than the zone's:
// it used to be scheduled onto another shard, whose CNAME then took the name (or, for the
// wildcard, every name of the shard) in the control plane's DNS, sending another namespace's
// traffic to it. A user name in a zone goes to that zone's router, where the older route
// holds the host as usual; the zone's apex and a wildcard over the whole zone are refused.
func TestUserRouteInAnotherRoutersZone(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, n := range []string{"shard1", "shard2"} {
		put(t, st, mesh.KindRouter, n, routerDoc(n, "")+"routeAdmission: {wildcardPolicy: WildcardsAllowed}\n")
	}
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", "www"), routeDoc("shop", "www", "www", ""))
	rc := &Reconciler{Store: st, Metrics: &Metrics{}, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, UserZones: []string{"acme.test"}}
	go rc.Run(ctx)
	eventually(t, "shop/www on shard1", func() (bool, string) { return scheduled(t, st, "shop", "www", "shard1") })

	user := func(name, host, extra string) {
		put(t, st, mesh.KindRoute, mesh.RouteKeyName("evil", name), routeDoc("evil", name, host, "")+"dnsType: user\n"+extra)
	}
	user("hijack", "shop-www.shard1.apps.example.com", "")                  // shop/www's system name
	user("all", "x.shard1.apps.example.com", "wildcardPolicy: Subdomain\n") // *.shard1.apps.example.com
	user("apex", "shard2.apps.example.com", "")
	user("fine", "api.shard2.apps.example.com", "")
	eventually(t, "fine on shard2, its zone's router", func() (bool, string) { return scheduled(t, st, "evil", "fine", "shard2") })
	eventually(t, "hijack decided", func() (bool, string) {
		r := getRoute(t, st, "evil", "hijack")
		if r.Status == nil || (r.PhaseOf() != mesh.PhaseScheduled && r.Status.Reason == "") {
			return false, fmt.Sprintf("%+v", r.Status)
		}
		return true, ""
	})
	if r := getRoute(t, st, "evil", "hijack"); r.Status.Router == "shard2" || r.Admitted() {
		t.Errorf("a user route on shard1's system name: router %q, admitted %v: %+v", r.Status.Router, r.Admitted(), r.Status)
	}
	for _, name := range []string{"all", "apex"} {
		eventually(t, name+" refused", func() (bool, string) {
			r := getRoute(t, st, "evil", name)
			ok := r.PhaseOf() == mesh.PhaseNew && r.Status != nil && r.Status.Reason == mesh.ReasonRouteNotAdmitted && strings.Contains(r.Status.Message, "zone")
			return ok, fmt.Sprintf("%+v", r.Status)
		})
	}
	// The control plane's DNS: shop/www's name is shard1's wildcard, not a CNAME elsewhere.
	items, _, _, err := st.List(ctx, "", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := authdns.Build(shardzones.Input(items, nil), nil)
	for _, q := range []string{"shop-www.shard1.apps.example.com.", "other-x.shard1.apps.example.com."} {
		req := new(dns.Msg)
		req.SetQuestion(q, dns.TypeA)
		for _, rr := range cat.Answer(req).Answer {
			if rr.Header().Rrtype == dns.TypeCNAME {
				t.Errorf("%s answered with %v", q, rr)
			}
		}
	}
}

// The older route owns a host, and "older" is the store's creation time: a route written
// with a creationTime of its own (years back) does not take the host from the route that
// holds it, not even for a moment - the document's time used to be taken over the store's
// until the reconciler rewrote the route without it, so any namespace could displace any
// other's route (its Envoy serving the host) once per write.
func TestForgedCreationTimeDoesNotWin(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put(t, st, mesh.KindRouter, "shard1", routerDoc("shard1", ""))
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", "www"), routeDoc("shop", "www", "www.acme.test", "")+"dnsType: user\n")
	rc := &Reconciler{Store: st, Metrics: &Metrics{}, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, UserZones: []string{"acme.test"}}
	go rc.Run(ctx)
	eventually(t, "shop/www admitted", func() (bool, string) {
		r := getRoute(t, st, "shop", "www")
		return r.Admitted(), fmt.Sprintf("%+v", r.Status)
	})
	_, _, rev, err := st.List(ctx, "", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	events := st.Watch(ctx, rev)
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("evil", "www"), routeDoc("evil", "www", "www.acme.test", "")+"dnsType: user\ncreationTime: \"2000-01-01T00:00:00Z\"\n")
	eventually(t, "evil/www decided", func() (bool, string) {
		r := getRoute(t, st, "evil", "www")
		return r.Status != nil && len(r.Status.Ingress) == 1, fmt.Sprintf("%+v", r.Status)
	})
	time.Sleep(500 * time.Millisecond) // a pass or two more
	for {
		select {
		case e := <-events:
			if e.Type != store.Put || e.Item.Type != mesh.KindRoute {
				continue
			}
			r, err := DecodeRoute(e.Item)
			if err != nil {
				t.Fatal(err)
			}
			if r.Namespace == "shop" && !r.Admitted() {
				t.Errorf("shop/www lost its host at revision %d: %+v", e.Revision, r.Status)
			}
			if r.Namespace == "evil" && r.Admitted() {
				t.Errorf("evil/www, with a forged creation time, took the host at revision %d", e.Revision)
			}
			continue
		default:
		}
		break
	}
}

// Two routers with the same dns (a shard copied and its dns left as it was): the control
// plane's DNS serves the zone for the first by mesh and name only, so the other takes no
// route - routes scheduled onto it used to get names that DNS answered with the first
// router's replicas, which do not serve them (scheduled, admitted, and unreachable). Its dns
// changed, it takes routes again.
func TestRouterWithAnotherRoutersDNSTakesNoRoutes(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put(t, st, mesh.KindRouter, "shard-a", routerDoc("shard-a", ""))
	put(t, st, mesh.KindRouter, "shard-b", "type: Router\nname: shard-b\ndns: shard-a.apps.example.com\n")
	rc := &Reconciler{Store: st, Metrics: &Metrics{}, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, UserZones: []string{"acme.test"}}
	go rc.Run(ctx)
	for i := range 4 {
		put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", fmt.Sprint("r", i)), routeDoc("shop", fmt.Sprint("r", i), fmt.Sprint("h", i), ""))
	}
	for i := range 4 {
		eventually(t, fmt.Sprint("r", i, " on shard-a"), func() (bool, string) { return scheduled(t, st, "shop", fmt.Sprint("r", i), "shard-a") })
	}
	put(t, st, mesh.KindRouter, "shard-b", routerDoc("shard-b", ""))
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", "r4"), routeDoc("shop", "r4", "h4", ""))
	eventually(t, "r4 on shard-b once its dns is its own", func() (bool, string) { return scheduled(t, st, "shop", "r4", "shard-b") })
}

// A user route of another mesh on a name in a shard's zone: never scheduled (the zones of
// every mesh are served by one DNS, so its CNAME would take the shard's name).
func TestUserRouteInAnotherMeshsZone(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	put(t, st, mesh.KindRouter, "shard1", routerDoc("shard1", ""))
	put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", "www"), routeDoc("shop", "www", "www", ""))
	other := func(kind, name, doc string) {
		if _, err := st.Put(ctx, store.Key{Mesh: "other", Type: kind, Name: name}, []byte("mesh: other\n"+doc), store.Any); err != nil {
			t.Fatal(err)
		}
	}
	other(mesh.KindRouter, "shard9", routerDoc("shard9", ""))
	other(mesh.KindRoute, mesh.RouteKeyName("evil", "hijack"), routeDoc("evil", "hijack", "shop-www.shard1.apps.example.com", "")+"dnsType: user\n")
	rc := &Reconciler{Store: st, Metrics: &Metrics{}, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, UserZones: []string{"acme.test"}}
	go rc.Run(ctx)
	eventually(t, "shop/www on shard1", func() (bool, string) { return scheduled(t, st, "shop", "www", "shard1") })
	eventually(t, "the other mesh's route refused", func() (bool, string) {
		it, err := st.Get(ctx, routeKey("other", "evil", "hijack"))
		if err != nil {
			return false, err.Error()
		}
		r, err := DecodeRoute(it)
		if err != nil {
			return false, err.Error()
		}
		if r.PhaseOf() == mesh.PhaseScheduled {
			t.Fatalf("scheduled on %s", r.Status.Router)
		}
		return r.Status != nil && r.Status.Reason == mesh.ReasonNoRouterMatches && strings.Contains(r.Status.Message, "default/shard1"), fmt.Sprintf("%+v", r.Status)
	})
}

// One user name in two meshes: one DNS serves both meshes' zones and a name leads to one
// router, so the route of the mesh that holds it keeps it and the other's is not scheduled
// (it used to be scheduled and admitted on its own router while the DNS answered with the
// first router by name - possibly the newer route's).
func TestUserNameInTwoMeshes(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inMesh := func(m, kind, name, doc string) { putInMesh(t, st, m, kind, name, doc) }
	inMesh("m1", mesh.KindRouter, "z-shard", routerDoc("z-shard", ""))
	inMesh("m2", mesh.KindRouter, "a-shard", routerDoc("a-shard", ""))
	inMesh("m1", mesh.KindRoute, mesh.RouteKeyName("shop", "www"), routeDoc("shop", "www", "www.acme.test", "")+"dnsType: user\n")
	rc := &Reconciler{Store: st, Metrics: &Metrics{}, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, UserZones: []string{"acme.test"}}
	go rc.Run(ctx)
	get := func(m, ns, name string) *mesh.Route { return getMeshRoute(t, st, m, ns, name) }
	eventually(t, "m1's route admitted", func() (bool, string) {
		r := get("m1", "shop", "www")
		return r.Admitted(), fmt.Sprintf("%+v", r.Status)
	})
	inMesh("m2", mesh.KindRoute, mesh.RouteKeyName("blog", "www"), routeDoc("blog", "www", "www.acme.test", "")+"dnsType: user\n")
	eventually(t, "m2's route refused", func() (bool, string) {
		r := get("m2", "blog", "www")
		if r.PhaseOf() == mesh.PhaseScheduled {
			t.Fatalf("m2's route scheduled on %s: %+v", r.Status.Router, r.Status)
		}
		return r.Status != nil && r.Status.Reason != "" && strings.Contains(r.Status.Message, "m1"), fmt.Sprintf("%+v", r.Status)
	})
	for _, rr := range storeAnswer(t, st, "www.acme.test.", dns.TypeA).Answer {
		if c, ok := rr.(*dns.CNAME); ok && !strings.HasPrefix(c.Target, "router-z-shard.") {
			t.Errorf("www.acme.test answered with %v, not m1's router", rr)
		}
	}
}

// A user route one level below another namespace's system name: refused in Strict
// ownership; admitted with InterNamespaceAllowed, and then the system name is still
// answered by the control plane's DNS (the name between them gets the shard's addresses).
// It used to be admitted, and the system name answered NOERROR with no data (RFC 4592: the
// user name's empty non-terminal stops the shard's wildcard).
func TestUserNameUnderASystemName(t *testing.T) {
	for _, ownership := range []string{mesh.NamespaceOwnershipStrict, mesh.NamespaceOwnershipAllowed} {
		t.Run(ownership, func(t *testing.T) {
			st := newStore(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			put(t, st, mesh.KindRouter, "shard-a", routerDoc("shard-a", "")+"dataplanes: {kuma.io/service: gw}\nrouteAdmission: {namespaceOwnership: "+ownership+"}\n")
			put(t, st, mesh.KindDataplane, "gw-1", "type: Dataplane\nname: gw-1\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: gw}\n")
			put(t, st, mesh.KindRoute, mesh.RouteKeyName("shop", "web"), routeDoc("shop", "web", "www", ""))
			time.Sleep(5 * time.Millisecond)
			put(t, st, mesh.KindRoute, mesh.RouteKeyName("blog", "z4"), routeDoc("blog", "z4", "a.shop-www.shard-a.apps.example.com", "")+"dnsType: user\n")
			rc := &Reconciler{Store: st, Metrics: &Metrics{}, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, Log: quiet}
			go rc.Run(ctx)
			eventually(t, "z4 decided", func() (bool, string) {
				r := getRoute(t, st, "blog", "z4")
				return r.Status != nil && len(r.Status.Ingress) == 1, fmt.Sprintf("%+v", r.Status)
			})
			z4 := getRoute(t, st, "blog", "z4")
			if c := z4.Status.Ingress[0].Conditions[0]; ownership == mesh.NamespaceOwnershipStrict {
				if c.Status != "False" || c.Reason != mesh.ReasonHostAlreadyClaimed || !strings.Contains(c.Message, "shop-www.shard-a.apps.example.com") {
					t.Errorf("z4 in Strict ownership: %+v, want HostAlreadyClaimed naming shop-www", c)
				}
			} else if c.Status != "True" {
				t.Errorf("z4 with InterNamespaceAllowed: %+v, want admitted", c)
			}
			if m := storeAnswer(t, st, "shop-www.shard-a.apps.example.com.", dns.TypeA); len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "10.0.0.1" {
				t.Errorf("shop/web's name answers %v", m)
			}
		})
	}
}

// User routes of another mesh on public names (api.github.com, a wildcard over com,
// in-addr.arpa) are never scheduled: a user name lies in a users' zone the operator gave
// or in a router's zone. They used to be bound and admitted, and every mesh's agents
// answered those names with the route's router.
func TestUserNamesOnlyInTheOperatorsDomains(t *testing.T) {
	st := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other := func(kind, name, doc string) {
		if _, err := st.Put(ctx, store.Key{Mesh: "other", Type: kind, Name: name}, []byte("mesh: other\n"+doc), store.Any); err != nil {
			t.Fatal(err)
		}
	}
	other(mesh.KindRouter, "evil", routerDoc("evil", "")+"routeAdmission: {wildcardPolicy: WildcardsAllowed}\n")
	user := func(name, host, extra string) {
		other(mesh.KindRoute, mesh.RouteKeyName("attacker", name), routeDoc("attacker", name, host, "")+"dnsType: user\n"+extra)
	}
	user("github", "api.github.com", "")
	user("com", "www.com", "wildcardPolicy: Subdomain\n")
	user("arpa", "in-addr.arpa", "")
	user("fine", "api.users.test", "")
	rc := &Reconciler{Store: st, Metrics: &Metrics{}, Resync: 200 * time.Millisecond, Backoff: 20 * time.Millisecond, UserZones: []string{"users.test"}, Log: quiet}
	go rc.Run(ctx)
	get := func(name string) *mesh.Route { return getMeshRoute(t, st, "other", "attacker", name) }
	eventually(t, "the route in the users' zone scheduled", func() (bool, string) {
		r := get("fine")
		return r.PhaseOf() == mesh.PhaseScheduled && r.Admitted(), fmt.Sprintf("%+v", r.Status)
	})
	for name, want := range map[string]string{"github": "in no users' zone", "com": "the wildcard *.com", "arpa": "in arpa"} {
		eventually(t, name+" refused", func() (bool, string) {
			r := get(name)
			if r.PhaseOf() == mesh.PhaseScheduled {
				t.Fatalf("%s scheduled: %+v", name, r.Status)
			}
			return r.Status != nil && r.Status.Reason == mesh.ReasonRouteNotAdmitted && strings.Contains(r.Status.Message, want), fmt.Sprintf("%+v", r.Status)
		})
	}
}

// storeAnswer is the control plane's DNS answer to name/qtype from the zones of what st
// holds now.
func storeAnswer(t *testing.T, st store.Store, name string, qtype uint16) *dns.Msg {
	t.Helper()
	items, _, _, err := st.List(context.Background(), "", "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	cat, _ := authdns.Build(shardzones.Input(items, nil), nil)
	req := new(dns.Msg)
	req.SetQuestion(name, qtype)
	return cat.Answer(req)
}

// putInMesh writes a resource's document into mesh m.
func putInMesh(t *testing.T, st store.Store, m, kind, name, doc string) {
	t.Helper()
	if _, err := st.Put(context.Background(), store.Key{Mesh: m, Type: kind, Name: name}, []byte("mesh: "+m+"\n"+doc), store.Any); err != nil {
		t.Fatal(err)
	}
}
