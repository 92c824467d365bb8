package shardzones

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/store"
)

func item(typ, name string, rev int64, doc string) store.Item {
	return store.Item{Key: store.Key{Mesh: "default", Type: typ, Name: name}, Doc: []byte(doc), Version: rev}
}

const router = "type: Router\nmesh: default\nname: shard1\ndns: shard1.apps.test\ndataplanes: {kuma.io/service: gw}\n"

func dp(name, ip, svc string) string {
	return "type: Dataplane\nmesh: default\nname: " + name + "\nnetworking:\n  address: " + ip + "\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: " + svc + "}\n"
}

func route(name, host, policy, admitted string) string {
	return "type: Route\nmesh: default\nname: " + name + "\nnamespace: acme\nhost: " + host + "\ndnsType: user\nwildcardPolicy: " + policy +
		"\nto: {service: web, port: 80}\nstatus:\n  phase: scheduled\n  router: shard1\n  ingress:\n  - router: shard1\n    conditions: [{type: Admitted, status: \"" + admitted + "\"}]\n"
}

// Replicas are the router's gateway dataplanes only; user names only of admitted user routes
// (a Subdomain route claims *.domain); the zone's revision is that of its newest input.
func TestInput(t *testing.T) {
	in := Input([]store.Item{
		item("Router", "shard1", 3, router+"status:\n  replicas: [{name: gw-1, address: 10.0.0.1, ready: true}]\n"),
		item("Dataplane", "gw-1", 4, dp("gw-1", "10.0.0.1", "gw")),
		item("Dataplane", "web-1", 9, dp("web-1", "10.0.0.9", "web")),
		item("Route", "www", 5, route("www", "www.acme.test", "None", "True")),
		item("Route", "wild", 7, route("wild", "x.wild.test", "Subdomain", "True")),
		item("Route", "held", 8, route("held", "held.acme.test", "None", "False")),
	}, nil)
	if len(in.Routers) != 1 || len(in.Routers[0].Replicas) != 1 || in.Routers[0].Replicas[0].Name != "gw-1" || !in.Routers[0].Replicas[0].Ready {
		t.Fatalf("routers %+v", in.Routers)
	}
	var users []string
	for _, u := range in.Users {
		users = append(users, u.Name)
	}
	if strings.Join(users, ",") != "www.acme.test,*.wild.test" {
		t.Fatalf("user names %v (the route not admitted must not be there)", users)
	}
	if in.Routers[0].Revision != 7 {
		t.Fatalf("zone revision %d, want 7 (the newest admitted route)", in.Routers[0].Revision)
	}
}

// Two meshes each with a router named shard1 (their own dns and gateways): a user route of
// mesh m1 is answered with m1's router - it used to be answered with whichever router of
// that name came last (mesh m2's), sending m1's users to m2's gateways.
func TestRoutersOfTheSameNameInTwoMeshes(t *testing.T) {
	inMesh := func(m string, it store.Item) store.Item {
		it.Mesh = m
		it.Doc = []byte(strings.ReplaceAll(string(it.Doc), "mesh: default", "mesh: "+m))
		return it
	}
	items := []store.Item{
		inMesh("m1", item("Router", "shard1", 3, router)),
		inMesh("m1", item("Dataplane", "gw-1", 4, dp("gw-1", "10.0.1.1", "gw"))),
		inMesh("m1", item("Route", "www.acme", 5, route("www", "www.acme.test", "None", "True"))),
		inMesh("m2", item("Router", "shard1", 6, strings.Replace(router, "shard1.apps.test", "shard1.m2.test", 1))),
		inMesh("m2", item("Dataplane", "gw-2", 7, dp("gw-2", "10.0.2.1", "gw"))),
	}
	in := Input(items, nil)
	in.DefaultNSAddr = netip.MustParseAddr("192.0.2.53")
	cat, problems := authdns.Build(in, nil)
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	req := new(dns.Msg)
	req.SetQuestion("www.acme.test.", dns.TypeA)
	var got []string
	for _, rr := range cat.Answer(req).Answer {
		got = append(got, rr.String())
	}
	text := strings.Join(got, "\n")
	if !strings.Contains(text, "10.0.1.1") || strings.Contains(text, "10.0.2.1") || strings.Contains(text, "m2.test") {
		t.Fatalf("m1's user name answered with:\n%s\nwant m1's router's gateway (10.0.1.1)", text)
	}
}

// Two routers with one dns: the older (the store's creation time) keeps the zone, whatever
// their names - the first by name used to take it from the router serving it.
func TestOlderRouterKeepsItsDNS(t *testing.T) {
	older := item("Router", "shard-b", 3, "type: Router\nmesh: default\nname: shard-b\ndns: shard-b.apps.test\n")
	older.Created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	newer := item("Router", "dup-a", 4, "type: Router\nmesh: default\nname: dup-a\ndns: shard-b.apps.test\n")
	newer.Created = older.Created.Add(time.Millisecond)
	in := Input([]store.Item{newer, older}, nil)
	in.DefaultNSAddr = netip.MustParseAddr("192.0.2.53")
	cat, problems := authdns.Build(in, nil)
	if z := cat.Zone("shard-b.apps.test"); z == nil || z.Router != "shard-b" {
		t.Fatalf("zone %+v, want shard-b's", z)
	}
	if len(problems) != 1 || !strings.Contains(problems[0].Error(), "dup-a") {
		t.Errorf("problems %v, want the newer router's", problems)
	}
}

// A replica's readiness is the one its Router's status says (the leader's, shown by the
// views): the zone answers the ready ones; a router whose status has none ready, or that has
// no status yet, answers all its replicas (fail static); a replica is answered at the address
// the status gives.
func TestInputReadinessFromTheRouterStatus(t *testing.T) {
	dps := []store.Item{
		item("Dataplane", "gw-1", 4, dp("gw-1", "10.0.0.1", "gw")),
		item("Dataplane", "gw-2", 5, dp("gw-2", "10.0.0.2", "gw")),
	}
	answer := func(routerDoc string) string {
		cat, _ := authdns.Build(Input(append([]store.Item{item("Router", "shard1", 3, routerDoc)}, dps...), nil), nil)
		return strings.Join(shardAddrs(cat), ",")
	}
	status := func(r1, r2 bool) string {
		return fmt.Sprintf("status:\n  replicas:\n  - {name: gw-1, address: 10.0.0.1, ready: %v}\n  - {name: gw-2, address: 10.0.0.2, ready: %v}\n", r1, r2)
	}
	for _, c := range []struct{ doc, want string }{
		{router + status(true, false), "10.0.0.1"},
		{router + status(false, true), "10.0.0.2"},
		{router + status(true, true), "10.0.0.1,10.0.0.2"},
		{router + status(false, false), "10.0.0.1,10.0.0.2"},
		{router, "10.0.0.1,10.0.0.2"},
	} {
		if got := answer(c.doc); got != c.want {
			t.Errorf("%s\nanswered %s, want %s", c.doc, got, c.want)
		}
	}
}
