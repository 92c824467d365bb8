package xds

import (
	"slices"
	"strings"
	"testing"

	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// The small shard: router shard1 (replicas: the gateway-1 dataplanes), router shard2.
func shardRouters() []mesh.Resource {
	return []mesh.Resource{
		&mesh.Router{Meta: mesh.Meta{Mesh: "default", Name: "shard1"}, DNS: "shard1.apps.test", Dataplanes: tags(mesh.ServiceTag, "gateway-1")},
		&mesh.Router{Meta: mesh.Meta{Mesh: "default", Name: "shard2"}, DNS: "shard2.apps.test", Dataplanes: tags(mesh.ServiceTag, "gateway-2")},
	}
}

// shardRoute is a route scheduled onto router, admitted or not.
func shardRoute(name, ns, host, dnsType, wildcard, path, svc, router, dns string, admitted bool) *mesh.Route {
	cond := "True"
	if !admitted {
		cond = "False"
	}
	return &mesh.Route{Meta: mesh.Meta{Mesh: "default", Name: name + "." + ns}, Namespace: ns, Host: host, DNSType: dnsType,
		WildcardPolicy: wildcard, Path: path, To: mesh.RouteTarget{Service: svc, Port: 8080},
		Status: &mesh.RouteStatus{Phase: mesh.PhaseScheduled, Router: router, DNS: dns, Ingress: []mesh.RouteIngress{{
			Router: router, Host: dns, Conditions: []mesh.RouteCondition{{Type: "Admitted", Status: cond}}}}}}
}

func shardRoutes() []mesh.Resource {
	return []mesh.Resource{
		shardRoute("web", "acme", "www", "system", "", "", "web", "shard1", "acme-www.shard1.apps.test", true),
		shardRoute("api", "acme", "www", "system", "", "/api", "api", "shard1", "acme-www.shard1.apps.test", true),
		shardRoute("shop", "acme", "shop.acme.test", "user", "", "/", "web", "shard1", "shop.acme.test", true),
		shardRoute("wild", "acme", "www.wild.test", "user", "Subdomain", "", "api", "shard1", "www.wild.test", true),
		shardRoute("taken", "other", "shop.acme.test", "user", "", "/", "api", "shard1", "shop.acme.test", false),
		shardRoute("elsewhere", "acme", "e", "system", "", "", "web", "shard2", "acme-e.shard2.apps.test", true),
	}
}

func shardSnapshot(t testing.TB, routes []mesh.Resource) *mesh.Snapshot {
	t.Helper()
	self := dataplane("gw-1", "10.1.0.1", inbound(8080, tags(mesh.ServiceTag, "gateway-1")), inbound(9901, tags(mesh.ServiceTag, "gw-admin")))
	rs := []mesh.Resource{
		dataplane("web-1", "10.0.3.1", inbound(8080, tags(mesh.ServiceTag, "web"))),
		dataplane("web-2", "10.0.3.2", inbound(8080, tags(mesh.ServiceTag, "web"))),
		dataplane("api-1", "10.0.4.1", inbound(9090, tags(mesh.ServiceTag, "api"))),
	}
	rs = append(append(rs, shardRouters()...), routes...)
	s, err := mesh.NewSnapshot(self, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// routerTable: what each virtual host of the router listener routes, "domain prefix>cluster".
func routerTable(t *testing.T, r *Resources) []string {
	t.Helper()
	var out []string
	for _, l := range r.Listeners {
		if !strings.HasPrefix(l.Name, "router:") {
			continue
		}
		m := &hcm.HttpConnectionManager{}
		if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(m); err != nil {
			t.Fatal(err)
		}
		for _, vh := range m.GetRouteConfig().GetVirtualHosts() {
			for _, rt := range vh.Routes {
				out = append(out, vh.Domains[0]+" "+rt.Match.GetPrefix()+">"+rt.GetRoute().GetCluster())
			}
		}
	}
	return out
}

// A router replica's Envoy gets one HTTP listener on its gateway port with a virtual host per
// admitted route name (a Subdomain route as *.domain), path prefixes longest first, each to
// its service's cluster; what is not admitted, or on another router, is not in it. Valid
// against Envoy's protos; the golden file holds the whole set.
func TestRouterReplicaListener(t *testing.T) {
	s := shardSnapshot(t, shardRoutes())
	r, err := Generate(s, vipalloc.NewTable(nil, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"*.wild.test />api",
		"acme-www.shard1.apps.test /api>api",
		"acme-www.shard1.apps.test />web",
		"shop.acme.test />web",
	}
	if got := routerTable(t, r); !slices.Equal(got, want) {
		t.Fatalf("router routes\n%v\nwant\n%v", got, want)
	}
	var names []string
	for _, l := range r.Listeners {
		names = append(names, l.Name)
	}
	if !slices.Equal(names, []string{"inbound:10.1.0.1:9901", "router:10.1.0.1:8080"}) {
		t.Fatalf("listeners %v: the gateway inbound must be the router listener, the other inbound stays", names)
	}
	checkGolden(t, "router_shard", goldenJSON(t, r))

	// the shop route leaves the router, the api route loses its admission: both leave the
	// config, and a generator with memory gives the same as a fresh generation
	gen := NewGenerator()
	if _, err := gen.Generate(s, vipalloc.NewTable(nil, nil), Options{}); err != nil {
		t.Fatal(err)
	}
	routes := shardRoutes()
	routes[2].(*mesh.Route).Status.Router = "shard2"
	routes[2].(*mesh.Route).Status.Ingress[0].Router = "shard2"
	routes[1].(*mesh.Route).Status.Ingress[0].Conditions[0].Status = "False"
	s2 := shardSnapshot(t, routes)
	r2, err := gen.Generate(s2, vipalloc.NewTable(nil, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r2.Validate(); err != nil {
		t.Fatal(err)
	}
	want2 := []string{"*.wild.test />api", "acme-www.shard1.apps.test />web"}
	if got := routerTable(t, r2); !slices.Equal(got, want2) {
		t.Fatalf("after the change\n%v\nwant\n%v", got, want2)
	}
	fresh, _ := Generate(s2, vipalloc.NewTable(nil, nil), Options{})
	if string(goldenJSON(t, fresh)) != string(goldenJSON(t, r2)) {
		t.Fatal("the generator's resources differ from a fresh generation")
	}
}

// A dataplane that serves no router gets no router listener, whatever routes exist.
func TestNoRouterListenerOffTheRouter(t *testing.T) {
	self := dataplane("web-1", "10.0.3.1", inbound(8080, tags(mesh.ServiceTag, "web")))
	s, err := mesh.NewSnapshot(self, append(shardRouters(), shardRoutes()...))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Generate(s, vipalloc.NewTable(nil, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range r.Listeners {
		if strings.HasPrefix(l.Name, "router:") {
			t.Fatalf("a router listener on a non-replica: %s", l.Name)
		}
	}
}

// The cross-reference check covers the routes' clusters: a route table naming a cluster that
// is not there fails validation.
func TestRouterRouteToMissingClusterRefused(t *testing.T) {
	s := shardSnapshot(t, shardRoutes())
	r, err := Generate(s, vipalloc.NewTable(nil, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	bad := &Resources{Listeners: r.Listeners, Endpoints: r.Endpoints}
	for _, c := range r.Clusters {
		if c.Name != "api" {
			bad.Clusters = append(bad.Clusters, c)
		}
	}
	var eps = bad.Endpoints[:0:0]
	for _, e := range r.Endpoints {
		if e.ClusterName != "api" {
			eps = append(eps, e)
		}
	}
	bad.Endpoints = eps
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), `"api"`) {
		t.Fatalf("want an error naming cluster api, got %v", err)
	}
}

// Every HTTP connection manager the agent makes (a router's, an outbound's HTTP rules) lets
// WebSocket upgrades through, as a tcp_proxy did: without the upgrade config Envoy answers
// an upgrade request 403.
func TestHTTPConnectionManagersPassWebSockets(t *testing.T) {
	g := &generator{}
	for _, m := range []*hcm.HttpConnectionManager{{StatPrefix: "a"}, {StatPrefix: "b"}} {
		f := g.hcmFilter(m)
		var got hcm.HttpConnectionManager
		if err := f.GetTypedConfig().UnmarshalTo(&got); err != nil {
			t.Fatal(err)
		}
		if len(got.UpgradeConfigs) != 1 || got.UpgradeConfigs[0].UpgradeType != "websocket" {
			t.Errorf("%s: upgrade configs %v, want websocket", m.StatPrefix, got.UpgradeConfigs)
		}
	}
}

// A Kuma gateway dataplane (networking.gateway, no inbounds) that a router selects by its
// gateway tags is one of its replicas: its Envoy serves the router's admitted routes on the
// router's listener port, valid against Envoy's protos.
func TestKumaGatewayServesItsRouter(t *testing.T) {
	rs, err := mesh.Decode("gw.yaml", []byte("type: Dataplane\nmesh: default\nname: gw-kuma\nnetworking:\n  address: 10.1.0.9\n  gateway: {type: BUILTIN, tags: {kuma.io/service: gateway-1}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	routers := shardRouters()
	routers[0].(*mesh.Router).Listener = &mesh.RouterListener{Port: 8443}
	others := []mesh.Resource{dataplane("web-1", "10.0.3.1", inbound(8080, tags(mesh.ServiceTag, "web"))),
		dataplane("api-1", "10.0.4.1", inbound(9090, tags(mesh.ServiceTag, "api")))}
	s, err := mesh.NewSnapshot(rs[0].(*mesh.Dataplane), append(append(others, routers...), shardRoutes()...))
	if err != nil {
		t.Fatal(err)
	}
	if !isRouterReplica(s) {
		t.Fatal("a Kuma gateway the router selects is not its replica")
	}
	r, err := Generate(s, vipalloc.NewTable(nil, nil), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range r.Listeners {
		names = append(names, l.Name)
	}
	if !slices.Equal(names, []string{"router:10.1.0.9:8443"}) {
		t.Fatalf("listeners %v, want the router's on its listener port", names)
	}
	if got := routerTable(t, r); len(got) != 4 || got[2] != "acme-www.shard1.apps.test />web" {
		t.Fatalf("router routes %v", got)
	}
}
