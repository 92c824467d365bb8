package shardzones

import (
	"net/netip"
	"strings"
	"testing"

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
		item("Router", "shard1", 3, router),
		item("Dataplane", "gw-1", 4, dp("gw-1", "10.0.0.1", "gw")),
		item("Dataplane", "web-1", 9, dp("web-1", "10.0.0.9", "web")),
		item("Route", "www", 5, route("www", "www.acme.test", "None", "True")),
		item("Route", "wild", 7, route("wild", "x.wild.test", "Subdomain", "True")),
		item("Route", "held", 8, route("held", "held.acme.test", "None", "False")),
	}, func(_, name string) bool { return name == "gw-1" }, nil)
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
	in := Input(items, nil, nil)
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
