package mesh

import (
	"strings"
	"testing"
)

func TestDecodeRoutingResources(t *testing.T) {
	rs, err := Decode("routes.yaml", []byte(`
type: Router
name: shard1
description: the first shard
dns: shard1.apps.example.com
routeSelector: {shard: "1"}
namespaceSelector: [shop, "*"]
dataplanes: {kuma.io/service: gateway-1}
routeAdmission: {namespaceOwnership: InterNamespaceAllowed, wildcardPolicy: WildcardsAllowed}
---
type: Route
name: web
namespace: shop
labels: {shard: "1"}
host: www
path: /cart
to: {service: web, port: 8080}
---
apiVersion: kuma.io/v1alpha1
kind: Route
metadata: {name: api, namespace: shop, labels: {shard: "2"}}
spec:
  host: api.acme.test
  dnsType: user
  wildcardPolicy: Subdomain
  to: {service: api, port: 80}
status:
  phase: scheduled
  dns: api.acme.test
  router: shard2
  ingress:
  - router: shard2
    conditions: [{type: Admitted, status: "True"}]
---
type: RouteBinding
name: web.shop
routeNamespace: shop
routeName: web
router: shard1
dns: shop-www.shard1.apps.example.com
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 4 {
		t.Fatalf("got %d resources", len(rs))
	}
	rt := rs[0].(*Router)
	if rt.DNS != "shard1.apps.example.com" || rt.RouteSelector["shard"] != "1" || rt.RouteAdmission.NamespaceOwnership != NamespaceOwnershipAllowed || rt.Mesh != "default" {
		t.Errorf("router: %+v", rt)
	}
	web := rs[1].(*Route)
	if web.Namespace != "shop" || web.DNSTypeOf() != DNSTypeSystem || web.WildcardPolicyOf() != WildcardNone || web.PhaseOf() != PhaseNew || web.To.Port != 8080 {
		t.Errorf("web: %+v", web)
	}
	api := rs[2].(*Route)
	if api.Namespace != "shop" || api.Status == nil || api.PhaseOf() != PhaseScheduled || api.Status.Ingress[0].Conditions[0].Status != "True" {
		t.Errorf("api (Kubernetes form, namespace from metadata, status kept): %+v", api)
	}
	b := rs[3].(*RouteBinding)
	if b.Name != RouteKeyName("shop", "web") || b.Router != "shard1" {
		t.Errorf("binding: %+v", b)
	}
}

func TestValidateRoutingResources(t *testing.T) {
	long := strings.Repeat("a", 64)
	tests := []struct {
		name, in string
		want     []string // substrings of the error, each naming field and value
	}{
		{"router dns required", "type: Router\nname: r\n", []string{`dns: required`}},
		{"router dns not DNS-1123", "type: Router\nname: r\ndns: Shard_1.example.com\n", []string{`dns: label "Shard_1"`, `(value "Shard_1.example.com")`}},
		{"router dns label too long", "type: Router\nname: r\ndns: " + long + ".example.com\n", []string{`is 64 characters, more than 63`}},
		{"router dns name too long", "type: Router\nname: r\ndns: " + strings.Repeat("abcdefghi.", 26) + "com\n", []string{`dns: 263 characters, more than 253`}},
		{"router admission", "type: Router\nname: r\ndns: a.b\nrouteAdmission: {namespaceOwnership: Loose, wildcardPolicy: Maybe}\n",
			[]string{`routeAdmission.namespaceOwnership: must be Strict or InterNamespaceAllowed (value "Loose")`, `routeAdmission.wildcardPolicy: must be WildcardsDisallowed or WildcardsAllowed (value "Maybe")`}},
		{"router namespace selector", "type: Router\nname: r\ndns: a.b\nnamespaceSelector: [Shop]\n", []string{`namespaceSelector[0]: a namespace: label "Shop"`}},
		{"route fields", "type: Route\nname: r\nnamespace: shop\nhost: www\ndnsType: custom\nwildcardPolicy: Everything\npath: cart\nto: {service: web}\n",
			[]string{`dnsType: must be system or user (value "custom")`, `wildcardPolicy: must be None or Subdomain (value "Everything")`, `path: must start with / (value "cart")`, `to.port: `}},
		{"route namespace", "type: Route\nname: r\nnamespace: Shop\nhost: www\nto: {service: web, port: 80}\n", []string{`namespace: label "Shop"`}},
		{"route missing namespace and service", "type: Route\nname: r\nhost: www\nto: {port: 80}\n", []string{`namespace: empty label`, `to.service: required`}},
		{"route host", "type: Route\nname: r\nnamespace: shop\nhost: w_w\nto: {service: web, port: 80}\n", []string{`host: label "w_w": character '_' not allowed`}},
		{"system name label too long", "type: Route\nname: r\nnamespace: " + strings.Repeat("n", 40) + "\nhost: " + strings.Repeat("h", 30) + "\nto: {service: web, port: 80}\n",
			[]string{`host: with dnsType system the first label of the name is <namespace>-<host>`, `71 characters, more than 63`}},
		{"system wildcard", "type: Route\nname: r\nnamespace: shop\nhost: www.acme.test\nwildcardPolicy: Subdomain\nto: {service: web, port: 80}\n",
			[]string{`wildcardPolicy: a wildcard needs a host the user owns: dnsType user (value "Subdomain")`}},
		{"status phase", "type: Route\nname: r\nnamespace: shop\nhost: www\nto: {service: web, port: 80}\nstatus: {phase: done}\n", []string{`status.phase: must be new or scheduled (value "done")`}},
		{"kubernetes status path", "kind: Route\nmetadata: {name: r, namespace: shop}\nspec: {host: www, to: {service: web, port: 80}}\nstatus: {phase: done}\n", []string{`status.phase: must be new or scheduled (value "done")`}},
		{"kubernetes namespace path", "kind: Route\nmetadata: {name: r, namespace: Shop}\nspec: {host: www, to: {service: web, port: 80}}\n", []string{`metadata.namespace: label "Shop"`}},
		{"binding", "type: RouteBinding\nname: b\nrouteNamespace: shop\nrouter: r1\ndns: x..y\n", []string{`routeName: required`, `dns: empty label (value "x..y")`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Decode("f.yaml", []byte(tt.in))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
	ok := "type: Route\nname: r\nnamespace: shop\nhost: '*.acme.test'\ndnsType: user\nwildcardPolicy: Subdomain\nto: {service: web, port: 80}\n"
	if _, err := Decode("f.yaml", []byte(ok)); err != nil {
		t.Errorf("a user wildcard host: %v", err)
	}
}

// A route is named within its namespace: two routes of one name in two namespaces are two
// routes of the agent's model, not a duplicate that refuses it.
func TestSnapshotRoutesOfOneNameInTwoNamespaces(t *testing.T) {
	rs, err := Decode("routes.yaml", []byte(`
type: Dataplane
name: gw
networking: {address: 10.0.0.1, inbound: [{port: 8080, tags: {kuma.io/service: gw}}]}
---
type: Route
name: store
namespace: shop
host: www
to: {service: web, port: 8080}
---
type: Route
name: store
namespace: blog
host: www
to: {service: blog, port: 8080}
`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSnapshot(rs[0].(*Dataplane), rs[1:])
	if err != nil {
		t.Fatalf("two routes named store in shop and blog: %v", err)
	}
	var got []string
	for _, r := range s.Routes {
		got = append(got, StoreName(r))
	}
	if strings.Join(got, " ") != "store.blog store.shop" {
		t.Fatalf("routes %v, want store.blog and store.shop", got)
	}
	// The same route twice is still a duplicate.
	if _, err := NewSnapshot(rs[0].(*Dataplane), []Resource{rs[1], rs[1]}); err == nil {
		t.Fatal("one route given twice was accepted")
	}
}
