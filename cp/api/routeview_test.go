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

// get routers and describe router show the router's status, the control plane's, which its
// DNS serves: ready/desired, the conditions, each replica not ready with its reason; the
// dataplanes themselves are not read again (their inbound health used to be shown while the
// DNS served agents' streams).
func TestRouterViews(t *testing.T) {
	routers := []Resource{res(t, "routers", "shard-a", `type: Router
name: shard-a
dns: shard-a.apps.example.com
routeSelector: {shard: a}
dataplanes: {kuma.io/service: gw-a}
replicas: 3
status:
  desiredReplicas: 3
  readyReplicas: 1
  replicas:
  - {name: gw-a-1, address: 10.0.0.1, ready: true}
  - {name: gw-a-2, address: 10.0.0.2, ready: false, reason: AgentNotConnected, message: no agent holds a stream}
  conditions:
  - {type: Available, status: "True", reason: ReplicasReady, message: 1 of 3 desired replicas ready, lastTransitionTime: "2026-11-28T08:00:00Z"}
  - {type: Degraded, status: "True", reason: FewerReadyReplicas, message: "1 of 3 desired replicas ready; 2 of 3 exist; not ready: gw-a-2 (AgentNotConnected)", lastTransitionTime: "2026-11-28T08:01:00Z"}
`), res(t, "routers", "shard-b", "type: Router\nname: shard-b\ndns: shard-b.apps.example.com\ndataplanes: {kuma.io/service: gw-b}\n")}
	routes := []Resource{
		res(t, "routes", "web.shop", "type: Route\nname: web\nnamespace: shop\nhost: www\nto: {service: web, port: 80}\nstatus:\n  phase: scheduled\n  router: shard-a\n  dns: shop-www.shard-a.apps.example.com\n  ingress:\n  - router: shard-a\n    conditions: [{type: Admitted, status: 'False', reason: HostAlreadyClaimed, message: route shop/old has host}]\n"),
		res(t, "routes", "new.shop", "type: Route\nname: new\nnamespace: shop\nhost: new\nto: {service: web, port: 80}\nstatus: {reason: NoRouterMatches, message: no router takes route shop/new}\n"),
	}
	var b strings.Builder
	if err := PrintRouters(&b, routers, routes); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"NAME     DNS                       SELECTOR  NAMESPACES  READY  AVAILABLE  DEGRADED  ROUTES",
		"shard-a  shard-a.apps.example.com  shard=a   <all>       1/3    True       True      1",
		"shard-b  shard-b.apps.example.com  <all>     <all>       0/2    Unknown    Unknown   0",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("get routers lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := DescribeRouter(&b, routers[0], routes); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "CNAME here") || !strings.Contains(b.String(), "CNAME target:     router-shard-a.shard-a.apps.example.com ") {
		t.Errorf("describe router: want the CNAME target router-shard-a.shard-a.apps.example.com, never the apex:\n%s", b.String())
	}
	for _, want := range []string{"Listener:         HTTP on port 8080", "Replicas:         kuma.io/service=gw-a, 3 desired, 1 ready of 2",
		"gw-a-1\t10.0.0.1\tready", "gw-a-2\t10.0.0.2\tnot ready: AgentNotConnected: no agent holds a stream",
		"Condition:        Degraded=True FewerReadyReplicas: 1 of 3 desired replicas ready; 2 of 3 exist; not ready: gw-a-2 (AgentNotConnected) (since 2026-11-28T08:01:00Z)",
		"Routes:           1", "shop/web\tshop-www.shard-a.apps.example.com\tFalse (HostAlreadyClaimed)"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("describe router lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := DescribeRouter(&b, routers[1], routes); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "readiness not written yet") {
		t.Errorf("describe router before its status:\n%s", b.String())
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

// describe router shows the conditions the scheduler wrote into its status: a router whose
// dns an older router holds says which.
func TestDescribeRouterConditions(t *testing.T) {
	rt := res(t, "routers", "dup-a", "type: Router\nname: dup-a\ndns: shard-b.apps.example.com\nstatus:\n  conditions:\n  - {type: DNS, status: 'False', reason: RouterDNSInUse, message: dns shard-b.apps.example.com is held by router default/shard-b}\n")
	var b strings.Builder
	if err := DescribeRouter(&b, rt, nil); err != nil {
		t.Fatal(err)
	}
	if want := "Condition:        DNS=False RouterDNSInUse: dns shard-b.apps.example.com is held by router default/shard-b"; !strings.Contains(b.String(), want) {
		t.Errorf("describe router lacks %q:\n%s", want, b.String())
	}
}
