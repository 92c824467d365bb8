package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/internal/etcdtest"
	"github.com/kumadp/kuma-dp/internal/testutil"
	"github.com/kumadp/kuma-dp/mesh"
)

// The done-when test of router shards: etcd, 2 replicas, three routers sharded by label and
// a catch-all, 1,000 routes applied; the leader is SIGKILLed mid-run. Every route ends up
// bound exactly once (one binding, its status the binding's), each set of candidates dealt
// out within one route per router, and the views show it.
func TestE2ERouteShardsOnEtcd(t *testing.T) {
	c := etcdtest.Start(t, 1)
	e := newCPEnv(t)
	if err := os.WriteFile(e.path("admin.token"), []byte("admin-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r1, _, api1 := e.startReplica(c, "replica-1")
	waitFor(t, "replica-1 leads", 20*time.Second, func() bool {
		return strings.Contains(e.kumaCP("get", "status", "--api-url", "http://"+api1), "leader:        replica-1")
	})
	r2, _, api2 := e.startReplica(c, "replica-2")
	_ = r2
	tok := e.path("admin.token")
	write := testutil.TempFiles(t)
	var routers strings.Builder
	for _, s := range []string{"a", "b", "c"} {
		fmt.Fprintf(&routers, "type: Router\nname: shard-%s\ndns: shard-%s.apps.example.com\nrouteSelector: {shard: %s}\ndataplanes: {kuma.io/service: gateway-%s}\n---\n", s, s, s, s)
	}
	routers.WriteString("type: Router\nname: catch-all\ndns: apps.example.com\n")
	e.kumaCP("apply", "-f", write("routers.yaml", routers.String()), "--api-url", "http://"+api1, "--admin-token-file", tok)

	// One route with --wait first: its final name is printed.
	out := e.kumaCP("apply", "--wait", "-f", write("one.yaml", "type: Route\nname: shop\nnamespace: team1\nhost: www\nlabels: {shard: a}\nto: {service: web, port: 80}\n"),
		"--api-url", "http://"+api2, "--admin-token-file", tok)
	if !strings.Contains(out, "route shop.team1 scheduled on router catch-all: team1-www.apps.example.com, admitted True") {
		t.Fatalf("apply --wait: %s", out)
	}
	// A route no router takes (its mesh has none): --wait says why, and fails.
	var wout, werr strings.Builder
	rc := dispatch([]string{"apply", "--wait", "--timeout", "3s", "-f", write("lost.yaml", "type: Route\nname: lost\nmesh: other\nnamespace: team1\nhost: www\nto: {service: web, port: 80}\n"),
		"--api-url", "http://" + api2, "--admin-token-file", tok}, &wout, &werr)
	if rc != exitFail || !strings.Contains(wout.String(), "route lost.team1 not scheduled yet: NoRouterMatches: no router takes route team1/lost") || !strings.Contains(werr.String(), "1 route(s) not scheduled within 3s: lost.team1") {
		t.Errorf("apply --wait of a route no router takes: exit %d\n%s%s", rc, wout.String(), werr.String())
	}
	// 999 more: a quarter on each shard label, a quarter without.
	const n = 1000
	var b strings.Builder
	for i := 1; i < n; i++ {
		labels := ""
		if s := i % 4; s < 3 {
			labels = fmt.Sprintf("labels: {shard: %c}\n", 'a'+s)
		}
		fmt.Fprintf(&b, "---\ntype: Route\nname: r%d\nnamespace: team%d\nhost: h%d\n%sto: {service: web, port: 80}\n", i, i%7, i, labels)
	}
	cl := api.NewClient("http://"+api2, "admin-secret")
	ctx := context.Background()
	applied := make(chan error, 1)
	go func() {
		_, err := cl.Apply(ctx, "routes.yaml", []byte(b.String()))
		applied <- err
	}()
	bound := func() int {
		bs, err := cl.List(ctx, "default", "routebindings")
		if err != nil {
			return -1
		}
		return len(bs)
	}
	waitFor(t, "a third of the routes bound", 60*time.Second, func() bool { return bound() > n/3 })
	r1.Kill() // the leader, mid-run
	if err := <-applied; err != nil {
		t.Fatal(err)
	}
	waitFor(t, "every route bound after the failover", 90*time.Second, func() bool { return bound() == n })
	// The status reads the leader every 500 ms: the new leader may have bound every route
	// before its status names it.
	waitFor(t, "replica-2 named the leader in its status", 10*time.Second, func() bool {
		return strings.Contains(e.kumaCP("get", "status", "--api-url", "http://"+api2), "leader:        replica-2")
	})

	routes, err := cl.List(ctx, "default", "routes")
	if err != nil {
		t.Fatal(err)
	}
	bindings, err := cl.List(ctx, "default", "routebindings")
	if err != nil {
		t.Fatal(err)
	}
	byRoute := map[string]*mesh.RouteBinding{}
	for _, r := range bindings {
		rs, err := mesh.Decode(r.Name, r.Spec)
		if err != nil {
			t.Fatal(err)
		}
		b := rs[0].(*mesh.RouteBinding)
		if byRoute[b.Name] != nil {
			t.Errorf("route %s bound twice", b.Name)
		}
		byRoute[b.Name] = b
	}
	perSet := map[string]map[string]int{}
	for _, r := range routes {
		rs, err := mesh.Decode(r.Name, r.Spec)
		if err != nil {
			t.Fatal(err)
		}
		rt := rs[0].(*mesh.Route)
		b := byRoute[r.Name]
		s := rt.Status
		if b == nil || s == nil || s.Phase != mesh.PhaseScheduled || s.Router != b.Router || s.DNS != b.DNS {
			t.Errorf("route %s: binding %+v, status %+v", r.Name, b, s)
			continue
		}
		want := rt.Namespace + "-" + rt.Host + ".apps.example.com"
		if b.Router != "catch-all" {
			want = rt.Namespace + "-" + rt.Host + "." + b.Router + ".apps.example.com"
		}
		if s.DNS != want {
			t.Errorf("route %s: dns %s, want %s", r.Name, s.DNS, want)
		}
		set := rt.Labels()["shard"]
		if perSet[set] == nil {
			perSet[set] = map[string]int{}
		}
		perSet[set][b.Router]++
	}
	t.Logf("spread by label: %v", perSet)
	for set, m := range perSet {
		if set == "" {
			if len(m) != 1 || m["catch-all"] != 250 {
				t.Errorf("unlabelled routes: %v", m)
			}
			continue
		}
		x, y := m["catch-all"], m["shard-"+set]
		if len(m) != 2 || x-y > 1 || y-x > 1 {
			t.Errorf("shard %s: %v, not within one", set, m)
		}
	}
	// The views.
	out = e.kumaCP("get", "routers", "--api-url", "http://"+api2)
	for _, want := range []string{"shard-a", "shard-a.apps.example.com", "shard=a", "0/2", "catch-all"} {
		if !strings.Contains(out, want) {
			t.Errorf("get routers lacks %q:\n%s", want, out)
		}
	}
	out = e.kumaCP("get", "routes", "--api-url", "http://"+api2)
	if lines := strings.Count(out, "\n"); lines != n+1 || !strings.Contains(out, "team1-www.apps.example.com") {
		t.Errorf("get routes: %d lines\n%s", lines, out[:min(len(out), 500)])
	}
	out = e.kumaCP("describe", "route", "shop", "-n", "team1", "--api-url", "http://"+api2)
	for _, want := range []string{"Phase:           scheduled", "Router:          catch-all", "Binding:         shop.team1 -> router catch-all", "Condition:       router catch-all: Admitted=True"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe route lacks %q:\n%s", want, out)
		}
	}
	out = e.kumaCP("describe", "router", "shard-b", "--api-url", "http://"+api2)
	if !strings.Contains(out, "Routes:           "+fmt.Sprint(perSet["b"]["shard-b"])) {
		t.Errorf("describe router:\n%s", out[:min(len(out), 800)])
	}
}
