package routing

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

func sel(labels map[string]string, namespaces ...string) func(*mesh.Router) {
	return func(r *mesh.Router) { r.RouteSelector, r.NamespaceSelector = labels, namespaces }
}

func labelled(labels map[string]string) func(*mesh.Route) {
	return func(r *mesh.Route) { r.SetLabels(labels) }
}

func TestCandidates(t *testing.T) {
	routers := []*mesh.Router{
		router("shard2", sel(map[string]string{"shard": "2"})),
		router("shard1", sel(map[string]string{"shard": "1"})),
		router("all"),
		router("shop-only", sel(nil, "shop")),
		router("shard1-shop", sel(map[string]string{"shard": "1"}, "shop")),
	}
	tests := []struct {
		route *mesh.Route
		want  string
	}{
		{rt("shop", "a", "a.test", "", 1, labelled(map[string]string{"shard": "1", "x": "y"})), "all,shard1,shard1-shop,shop-only"},
		{rt("blog", "a", "a.test", "", 1, labelled(map[string]string{"shard": "1"})), "all,shard1"},
		{rt("blog", "a", "a.test", "", 1, labelled(map[string]string{"shard": "3"})), "all"},
		{rt("blog", "a", "a.test", "", 1), "all"},
	}
	for _, tt := range tests {
		var names []string
		for _, c := range Candidates(routers, tt.route) {
			names = append(names, c.Name)
		}
		if got := strings.Join(names, ","); got != tt.want {
			t.Errorf("%s %v: candidates %s, want %s", RouteKey(tt.route), tt.route.Labels(), got, tt.want)
		}
	}
}

func TestFinalDNS(t *testing.T) {
	r1 := router("shard1")
	sys := rt("shop", "web", "www", "", 1, func(r *mesh.Route) { r.DNSType = "" })
	if got, err := FinalDNS(sys, r1); err != nil || got != "shop-www.shard1.apps.example.com" {
		t.Errorf("system: %q %v", got, err)
	}
	user := rt("shop", "web", "www.acme.test", "", 1)
	if got, err := FinalDNS(user, r1); err != nil || got != "www.acme.test" {
		t.Errorf("user: %q %v", got, err)
	}
	long := rt("shop", "web", strings.Repeat("h", 60), "", 1, func(r *mesh.Route) { r.DNSType = mesh.DNSTypeSystem })
	_, err := FinalDNS(long, r1)
	var e *Error
	if !errors.As(err, &e) || e.Reason != mesh.ReasonRouteNotAdmitted || !strings.Contains(e.Message, "more than 63") {
		t.Errorf("a 65-character first label: %v", err)
	}
}

// Round-robin spreads within one route per router, per set of candidates.
func TestRoundRobin(t *testing.T) {
	s := NewScheduler(nil)
	for _, n := range []string{"a", "b", "c"} {
		s.SetRouter(router(n))
	}
	for i := range 100 {
		if _, err := s.Schedule(rt("ns", fmt.Sprint("r", i), fmt.Sprintf("h%d.test", i), "", i)); err != nil {
			t.Fatal(err)
		}
	}
	if la, lb, lc := s.Load("a"), s.Load("b"), s.Load("c"); la != 34 || lb != 33 || lc != 33 {
		t.Errorf("loads %d %d %d, want 34 33 33", la, lb, lc)
	}
}

func TestLeastRoutesAndUserStrategy(t *testing.T) {
	s := NewScheduler(LeastRoutes)
	s.SetRouter(router("a"))
	s.SetRouter(router("b"))
	for i := range 5 { // preload a
		s.Bind(rt("ns", fmt.Sprint("pre", i), fmt.Sprintf("p%d.test", i), "", i), "a")
	}
	for i := range 7 {
		got, err := s.Schedule(rt("ns", fmt.Sprint("r", i), fmt.Sprintf("h%d.test", i), "", i))
		if err != nil {
			t.Fatal(err)
		}
		if i < 5 && got.Name != "b" {
			t.Errorf("route %d went to %s while b had fewer", i, got.Name)
		}
	}
	if s.Load("a") != 6 || s.Load("b") != 6 {
		t.Errorf("loads a=%d b=%d, want 6 6", s.Load("a"), s.Load("b"))
	}

	// A user-written strategy: routes of namespace "vip" go to the router named "b".
	u := NewScheduler(func(s *Scheduler) Strategy {
		return StrategyFunc(func(r *mesh.Route) (*mesh.Router, error) {
			if r.Namespace == "vip" {
				return s.Router("b"), nil
			}
			return s.Router("a"), nil
		})
	})
	u.SetRouter(router("a"))
	u.SetRouter(router("b"))
	if got, _ := u.Schedule(rt("vip", "x", "x.test", "", 1)); got.Name != "b" {
		t.Errorf("user strategy: %s", got.Name)
	}
	// A strategy picking a router that does not take the route is refused.
	u.SetRouter(router("a", sel(map[string]string{"tier": "gold"})))
	_, err := u.Schedule(rt("other", "y", "y.test", "", 1))
	var e *Error
	if !errors.As(err, &e) || e.Reason != mesh.ReasonNoRouterMatches || !strings.Contains(e.Message, "picked router a, which does not take") {
		t.Errorf("a bad pick: %v", err)
	}
	// A strategy's own error is returned as is.
	boom := NewScheduler(func(*Scheduler) Strategy {
		return StrategyFunc(func(*mesh.Route) (*mesh.Router, error) { return nil, errors.New("capacity exhausted") })
	})
	boom.SetRouter(router("a"))
	if _, err := boom.Schedule(rt("ns", "z", "z.test", "", 1)); err == nil || err.Error() != "capacity exhausted" {
		t.Errorf("strategy error: %v", err)
	}
}

// Routes sharing a host, or a wildcard domain, go to the router already serving it.
func TestAffinity(t *testing.T) {
	s := NewScheduler(nil)
	for _, n := range []string{"a", "b", "c"} {
		s.SetRouter(router(n, wildcardsOn))
	}
	sched := func(r *mesh.Route) string {
		t.Helper()
		got, err := s.Schedule(r)
		if err != nil {
			t.Fatalf("%s: %v", RouteKey(r), err)
		}
		return got.Name
	}
	first := sched(rt("ns", "www-cart", "www.acme.test", "/cart", 1))
	for i := range 5 {
		if got := sched(rt("ns", fmt.Sprint("www-", i), "www.acme.test", fmt.Sprintf("/p%d", i), 2+i)); got != first {
			t.Errorf("same host went to %s, not %s", got, first)
		}
	}
	// A wildcard over www's domain joins it; so do hosts under the wildcard later.
	if got := sched(rt("ns", "wild", "api.acme.test", "", 10, wildcard)); got != first {
		t.Errorf("wildcard *.acme.test went to %s, not %s", got, first)
	}
	if got := sched(rt("other", "shop", "shop.acme.test", "", 11)); got != first {
		t.Errorf("a host under the wildcard went to %s, not %s", got, first)
	}
	// The apex is not under its own wildcard; a deeper name is not either.
	apex, deep := sched(rt("ns", "apex", "acme.test", "", 12)), sched(rt("ns", "deep", "x.y.acme.test", "", 13))
	if apex == "" || deep == "" {
		t.Fatal("unscheduled")
	}
	// System names: the same namespace and host share; another namespace does not need to.
	sys := func(ns, name string) *mesh.Route {
		return rt(ns, name, "www", "", 1, func(r *mesh.Route) { r.DNSType = mesh.DNSTypeSystem })
	}
	s1 := sched(sys("blog", "one"))
	if got := sched(sys("blog", "two")); got != s1 {
		t.Errorf("system name blog-www split between %s and %s", s1, got)
	}

	// The router serving a host does not take a new route with it: not scheduled, named.
	s.SetRouter(router(first, wildcardsOn, sel(map[string]string{"tier": "gold"})))
	_, err := s.Schedule(rt("ns", "www-late", "www.acme.test", "/late", 20))
	var e *Error
	if !errors.As(err, &e) || e.Reason != mesh.ReasonNoRouterMatches || !strings.Contains(e.Message, "the host www.acme.test is served by router "+first) {
		t.Errorf("affinity to a router that does not take the route: %v", err)
	}

	// Unbinding every route of the host (and the wildcard over it) releases the affinity.
	for _, k := range []string{"ns/www-cart", "ns/www-0", "ns/www-1", "ns/www-2", "ns/www-3", "ns/www-4", "ns/wild"} {
		s.Unbind(k)
	}
	if _, err := s.Schedule(rt("ns", "www-late", "www.acme.test", "/late", 20)); err != nil {
		t.Errorf("after the host's routes left: %v", err)
	}
}

func TestNoRouterAndRouterDeletion(t *testing.T) {
	s := NewScheduler(nil)
	r := rt("ns", "x", "x.test", "", 1)
	r.SetLabels(map[string]string{"shard": "z", "env": "prod"})
	_, err := s.Schedule(r)
	var e *Error
	if !errors.As(err, &e) || e.Reason != mesh.ReasonNoRouterMatches {
		t.Fatalf("no routers: %v", err)
	}
	// labels as a selector writes them, not Go's map[env:prod shard:z]
	if !strings.Contains(e.Message, "(labels env=prod,shard=z)") {
		t.Errorf("no routers: %q, want the labels as env=prod,shard=z", e.Message)
	}
	s.SetRouter(router("a"))
	s.SetRouter(router("b"))
	for i := range 4 {
		if _, err := s.Schedule(rt("ns", fmt.Sprint("r", i), fmt.Sprintf("h%d.test", i), "", i)); err != nil {
			t.Fatal(err)
		}
	}
	gone := s.DeleteRouter("a")
	if strings.Join(gone, ",") != "ns/r0,ns/r2" || s.Load("a") != 0 || s.BoundTo("ns/r0") != "" {
		t.Errorf("deleting a: unbound %v, load %d", gone, s.Load("a"))
	}
	for _, k := range gone {
		name := strings.TrimPrefix(k, "ns/")
		got, err := s.Schedule(rt("ns", name, "h"+name[1:]+".test", "", 1))
		if err != nil || got.Name != "b" {
			t.Errorf("re-scheduling %s: %v %v", k, got, err)
		}
	}
	if s.Load("b") != 4 {
		t.Errorf("b has %d routes", s.Load("b"))
	}
}

// Three shards by label and a catch-all: each set of candidates is dealt out in turn, and a
// scheduler rebuilt from the bindings (a new leader) continues within one.
func TestRoundRobinShardsAcrossLeaders(t *testing.T) {
	routers := []*mesh.Router{router("all"), router("s1", sel(map[string]string{"shard": "1"})), router("s2", sel(map[string]string{"shard": "2"})), router("s3", sel(map[string]string{"shard": "3"}))}
	s := NewScheduler(nil)
	for _, r := range routers {
		s.SetRouter(r)
	}
	var routes []*mesh.Route
	where := map[string]string{}
	for i := range 401 {
		r := rt("ns", fmt.Sprint("r", i), fmt.Sprintf("h%d.test", i), "", i, labelled(map[string]string{"shard": fmt.Sprint(i%4 + 1)}))
		routes = append(routes, r)
		if i == 150 { // leader change: a new scheduler rebuilt from the bindings
			s = NewScheduler(nil)
			for _, rr := range routers {
				s.SetRouter(rr)
			}
			for _, old := range routes[:i] {
				s.Bind(old, where[RouteKey(old)])
			}
		}
		got, err := s.Schedule(r)
		if err != nil {
			t.Fatal(err)
		}
		where[RouteKey(r)] = got.Name
	}
	perSet := map[string]map[string]int{}
	for _, r := range routes {
		shard := r.Labels()["shard"]
		if perSet[shard] == nil {
			perSet[shard] = map[string]int{}
		}
		perSet[shard][where[RouteKey(r)]]++
	}
	for shard, m := range perSet {
		if shard == "4" {
			if len(m) != 1 || m["all"] != 100 {
				t.Errorf("unsharded routes: %v", m)
			}
			continue
		}
		a, b := m["all"], m["s"+shard]
		if len(m) != 2 || a-b > 1 || b-a > 1 {
			t.Errorf("shard %s: %v, not within one", shard, m)
		}
	}
}

// A user name inside a router's zone belongs to that router (the deepest zone holding it);
// the apex and a wildcard over the whole zone are refused; names outside every zone and
// system routes are free.
func TestZoneOwner(t *testing.T) {
	parent := router("apps", func(r *mesh.Router) { r.DNS = "apps.example.com" })
	child := router("shard1")
	routers := []*mesh.Router{parent, child}
	tests := []struct {
		route *mesh.Route
		owner string
		err   string
	}{
		{rt("ns", "a", "www.acme.test", "", 1), "", ""},
		{rt("ns", "a", "x.shard1.apps.example.com", "", 1), "shard1", ""},
		{rt("ns", "a", "X.Shard1.apps.example.com", "", 1), "shard1", ""},
		{rt("ns", "a", "x.shard2.apps.example.com", "", 1), "apps", ""},
		{rt("ns", "a", "x.y.shard1.apps.example.com", "", 1, wildcard), "shard1", ""},
		{rt("ns", "a", "shard1.apps.example.com", "", 1), "shard1", mesh.ReasonRouteNotAdmitted},
		{rt("ns", "a", "x.shard1.apps.example.com", "", 1, wildcard), "shard1", mesh.ReasonRouteNotAdmitted},
		{rt("ns", "a", "xshard1.apps.example.com", "", 1), "apps", ""},
		// the router's canonical name: every user name's CNAME points there
		{rt("ns", "a", "router-shard1.shard1.apps.example.com", "", 1), "shard1", mesh.ReasonRouteNotAdmitted},
		// and names under it, which would leave it empty (RFC 4592): no user name would resolve
		{rt("ns", "a", "x.router-shard1.shard1.apps.example.com", "", 1), "shard1", mesh.ReasonRouteNotAdmitted},
		{rt("ns", "a", "x.router-shard1.shard1.apps.example.com", "", 1, wildcard), "shard1", mesh.ReasonRouteNotAdmitted},
		{rt("ns", "a", "x.y.router-shard1.shard1.apps.example.com", "", 1, wildcard), "shard1", mesh.ReasonRouteNotAdmitted},
		{rt("ns", "a", "www", "", 1, func(r *mesh.Route) { r.DNSType = mesh.DNSTypeSystem }), "", ""},
	}
	for _, tt := range tests {
		owner, err := ZoneOwner(routers, tt.route)
		name := ""
		if owner != nil {
			name = owner.Name
		}
		var e *Error
		reason := ""
		if errors.As(err, &e) {
			reason = e.Reason
		}
		if name != tt.owner || reason != tt.err {
			t.Errorf("%s (%s): owner %q, error %v; want %q, %q", tt.route.Host, tt.route.WildcardPolicy, name, err, tt.owner, tt.err)
		}
	}
	// Scheduling: only the owner is a candidate; an owner whose selectors refuse the route
	// leaves it unscheduled, named.
	s := NewScheduler(nil)
	s.SetRouter(router("a"))
	s.SetRouter(router("b", sel(map[string]string{"shard": "b"})))
	for i := range 3 {
		if got, err := s.Schedule(rt("ns", fmt.Sprint("r", i), fmt.Sprintf("h%d.a.apps.example.com", i), "", i)); err != nil || got.Name != "a" {
			t.Fatalf("a name in a's zone: %v %v", got, err)
		}
	}
	_, err := s.Schedule(rt("ns", "x", "h.b.apps.example.com", "", 9))
	var e *Error
	if !errors.As(err, &e) || e.Reason != mesh.ReasonNoRouterMatches || !strings.Contains(e.Message, "router b's zone") {
		t.Fatalf("a name in the zone of a router that does not take the route: %v", err)
	}
}
