package api

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

func res(t *testing.T, typ, name, doc string) Resource {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return Resource{Mesh: "default", Type: typ, Name: name, Spec: json.RawMessage(j), CreationTime: time.Now().Add(-time.Minute)}
}

// get routers counts a router's replicas (dataplanes with an inbound carrying its tags) and
// the ready ones (no inbound NotReady or unhealthy), and its scheduled routes.
func TestRouterViews(t *testing.T) {
	routers := []Resource{res(t, "routers", "shard-a", "type: Router\nname: shard-a\ndns: shard-a.apps.example.com\nrouteSelector: {shard: a}\ndataplanes: {kuma.io/service: gw-a}\n")}
	dp := func(name, state string) Resource {
		return res(t, "dataplanes", name, "type: Dataplane\nname: "+name+"\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 8080\n    tags: {kuma.io/service: gw-a}\n"+state)
	}
	dps := []Resource{dp("gw-a-1", ""), dp("gw-a-2", "    state: NotReady\n"), dp("gw-a-3", "    health: {ready: false}\n"),
		res(t, "dataplanes", "other", "type: Dataplane\nname: other\nnetworking:\n  address: 10.0.0.2\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: web}\n")}
	routes := []Resource{
		res(t, "routes", "web.shop", "type: Route\nname: web\nnamespace: shop\nhost: www\nto: {service: web, port: 80}\nstatus:\n  phase: scheduled\n  router: shard-a\n  dns: shop-www.shard-a.apps.example.com\n  ingress:\n  - router: shard-a\n    conditions: [{type: Admitted, status: 'False', reason: HostAlreadyClaimed, message: route shop/old has host}]\n"),
		res(t, "routes", "new.shop", "type: Route\nname: new\nnamespace: shop\nhost: new\nto: {service: web, port: 80}\nstatus: {reason: NoRouterMatches, message: no router takes route shop/new}\n"),
	}
	var b strings.Builder
	if err := PrintRouters(&b, routers, routes, dps); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "shard-a  shard-a.apps.example.com  shard=a   <all>       1/3    1") {
		t.Errorf("get routers:\n%s", b.String())
	}
	b.Reset()
	if err := DescribeRouter(&b, routers[0], routes, dps); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "CNAME here") || !strings.Contains(b.String(), "CNAME target:     router-shard-a.shard-a.apps.example.com ") {
		t.Errorf("describe router: want the CNAME target router-shard-a.shard-a.apps.example.com, never the apex:\n%s", b.String())
	}
	for _, want := range []string{"gw-a-1\tready", "gw-a-2\tnot ready", "gw-a-3\tnot ready", "Routes:           1", "shop/web\tshop-www.shard-a.apps.example.com\tFalse (HostAlreadyClaimed)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe router lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := PrintRoutes(&b, routes, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"shop       web   www   system  shard-a  scheduled  shop-www.shard-a.apps.example.com  False (HostAlreadyClaimed)  1m", "shop       new   new   system  -        new        -"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("get routes lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := DescribeRoute(&b, routes[1], nil); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Not scheduled:   NoRouterMatches: no router takes route shop/new") {
		t.Errorf("describe route:\n%s", b.String())
	}
}
