package mesh

import (
	"strings"
	"testing"
)

// Kuma's default route, as every Kuma mesh has it (route-all-<mesh>), in its universal and
// Kubernetes forms.
const kumaRouteAll = `type: TrafficRoute
name: route-all-default
mesh: default
sources:
  - match:
      kuma.io/service: '*'
destinations:
  - match:
      kuma.io/service: '*'
conf:
  loadBalancer:
    roundRobin: {}
  destination:
    kuma.io/service: '*'
`

const kumaRouteSplitK8s = `apiVersion: kuma.io/v1alpha1
kind: TrafficRoute
mesh: default
metadata:
  name: backend-canary
spec:
  sources:
    - match:
        kuma.io/service: frontend_kuma-demo_svc_8080
  destinations:
    - match:
        kuma.io/service: backend_kuma-demo_svc_3001
  conf:
    split:
      - weight: 90
        destination:
          kuma.io/service: backend_kuma-demo_svc_3001
          version: v1
      - weight: 10
        destination:
          kuma.io/service: backend_kuma-demo_svc_3001
          version: v2
    loadBalancer:
      leastRequest:
        choiceCount: 4
`

// Kuma's TrafficRoute conf (split or destination, and loadBalancer) reads as the design's
// weighted destinations; the load balancer is kept as written.
func TestKumaTrafficRouteConf(t *testing.T) {
	rs, err := Decode("route-all.yaml", []byte(kumaRouteAll))
	if err != nil {
		t.Fatal(err)
	}
	tr := rs[0].(*TrafficRoute)
	if len(tr.Conf) != 1 || tr.Conf[0].Weight != 1 || tr.Conf[0].Destination.Value(ServiceTag) != Wildcard ||
		string(tr.LoadBalancer) != `{"roundRobin":{}}` {
		t.Fatalf("route-all: conf %+v, loadBalancer %s", tr.Conf, tr.LoadBalancer)
	}

	rs, err = Decode("canary.yaml", []byte(kumaRouteSplitK8s))
	if err != nil {
		t.Fatal(err)
	}
	tr = rs[0].(*TrafficRoute)
	if tr.Name != "backend-canary" || len(tr.Conf) != 2 || tr.Conf[0].Weight != 90 || tr.Conf[1].Destination.Value("version") != "v2" ||
		string(tr.LoadBalancer) != `{"leastRequest":{"choiceCount":4}}` {
		t.Fatalf("split: %+v, loadBalancer %s", tr, tr.LoadBalancer)
	}
}

// What cannot be read in Kuma's form is named as Kuma's form writes it.
func TestKumaTrafficRouteConfErrors(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"split and destination", strings.Replace(kumaRouteAll, "  destination:\n    kuma.io/service: '*'\n",
			"  destination:\n    kuma.io/service: '*'\n  split:\n  - weight: 1\n    destination: {kuma.io/service: a}\n", 1),
			`conf.destination: give split or destination, not both`},
		{"neither", strings.Replace(kumaRouteAll, "  destination:\n    kuma.io/service: '*'\n", "", 1),
			`conf: needs split (weighted destinations) or destination`},
		{"HTTP rules", strings.Replace(kumaRouteAll, "conf:\n", "conf:\n  http:\n  - match: {path: {prefix: /api}}\n    destination: {kuma.io/service: api}\n", 1),
			`conf.http: HTTP rules are not supported`},
		{"a load balancer misspelt", strings.Replace(kumaRouteAll, "roundRobin", "ringHsh", 1),
			`conf.loadBalancer.ringHsh: unknown load balancer, did you mean ringHash?`},
		{"two load balancers", strings.Replace(kumaRouteAll, "    roundRobin: {}\n", "    roundRobin: {}\n    random: {}\n", 1),
			`conf.loadBalancer: give one of roundRobin, leastRequest, ringHash, random, maglev`},
		{"a weight not a number", strings.Replace(kumaRouteSplitK8s, "weight: 10", "weight: ten", 1),
			`spec.conf.split[1].weight`},
		{"a tag value empty", strings.Replace(kumaRouteSplitK8s, "version: v2", "version: ''", 1),
			`spec.conf.split[1].destination.version: empty tag value`},
		{"a wildcard other than the service", strings.Replace(kumaRouteAll, "  destination:\n    kuma.io/service: '*'\n",
			"  destination:\n    kuma.io/service: '*'\n    version: '*'\n", 1),
			`conf.destination.version: "*" is only allowed as kuma.io/service`},
		{"an unknown field", strings.Replace(kumaRouteAll, "conf:\n", "conf:\n  splits: []\n", 1),
			`conf.splits: unknown field, did you mean split?`},
	} {
		_, err := Decode("route.yaml", []byte(tc.doc))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}

// A Kuma policy of a kind the agent does not read (a dump of a Kuma mesh's policies) is
// refused saying so, in either form, not as a misspelt kind.
func TestKumaOnlyKindsNamed(t *testing.T) {
	for _, doc := range []string{
		"type: TrafficPermission\nname: allow-all-default\nmesh: default\nsources: [{match: {kuma.io/service: '*'}}]\ndestinations: [{match: {kuma.io/service: '*'}}]\n",
		"apiVersion: kuma.io/v1alpha1\nkind: MeshTimeout\nmetadata: {name: mesh-timeout-all-default}\nspec: {targetRef: {kind: Mesh}}\n",
	} {
		_, err := Decode("kuma.yaml", []byte(doc))
		if err == nil || !strings.Contains(err.Error(), "a Kuma policy kuma-dp does not act on (it acts on Dataplane, VirtualOutbound, TrafficRoute") {
			t.Errorf("got %v", err)
		}
	}
	if _, err := Decode("typo.yaml", []byte("type: TrafficRoot\nname: x\n")); err == nil || !strings.Contains(err.Error(), "did you mean TrafficRoute?") {
		t.Errorf("a misspelt kind: %v", err)
	}
}
