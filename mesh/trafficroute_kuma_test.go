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
		{"HTTP rules misspelt", strings.Replace(kumaRouteAll, "conf:\n", "conf:\n  htp: []\n", 1),
			`conf.htp: unknown field, did you mean http?`},
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
		if err == nil || !strings.Contains(err.Error(), "a Kuma policy kuma-dp does not act on (it reads Dataplane, VirtualOutbound, TrafficRoute") {
			t.Errorf("got %v", err)
		}
	}
	if _, err := Decode("typo.yaml", []byte("type: TrafficRoot\nname: x\n")); err == nil || !strings.Contains(err.Error(), "did you mean TrafficRoute?") {
		t.Errorf("a misspelt kind: %v", err)
	}
}

// A load balancer's settings are read with Kuma's names and Envoy's limits: what Envoy would
// refuse (and with it the agent's whole update) is refused here, naming the setting.
func TestKumaLoadBalancerSettings(t *testing.T) {
	withLB := func(lb string) string {
		return strings.Replace(kumaRouteAll, "    roundRobin: {}\n", lb, 1)
	}
	for _, tc := range []struct {
		name, lb string
		want     LoadBalancer
	}{
		{"round robin", "    roundRobin: {}\n", LoadBalancer{Type: "roundRobin"}},
		{"settings left out", "    leastRequest: {}\n", LoadBalancer{Type: "leastRequest"}},
		{"null settings", "    random:\n", LoadBalancer{Type: "random"}},
		{"choice count", "    leastRequest: {choiceCount: 5}\n", LoadBalancer{Type: "leastRequest", ChoiceCount: 5}},
		{"ring hash", "    ringHash: {hashFunction: MURMUR_HASH_2, minRingSize: 64, maxRingSize: 4096}\n",
			LoadBalancer{Type: "ringHash", HashFunction: "MURMUR_HASH_2", MinRingSize: 64, MaxRingSize: 4096}},
		{"maglev", "    maglev: {}\n", LoadBalancer{Type: "maglev"}},
	} {
		rs, err := Decode("route.yaml", []byte(withLB(tc.lb)))
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if got := ParseLoadBalancer(rs[0].(*TrafficRoute).LoadBalancer); got != tc.want {
			t.Errorf("%s: read %+v, want %+v", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct{ name, lb, want string }{
		{"one choice", "    leastRequest: {choiceCount: 1}\n", `conf.loadBalancer.leastRequest.choiceCount: must be 2 or more (Envoy compares at least two hosts; 0 or left out is 2) (value "1")`},
		{"a negative choice", "    leastRequest: {choiceCount: -3}\n", `conf.loadBalancer.leastRequest.choiceCount: expected a whole number`},
		{"choices beyond uint32", "    leastRequest: {choiceCount: 4294967296}\n", `conf.loadBalancer.leastRequest.choiceCount: expected a whole number`},
		{"an unknown hash", "    ringHash: {hashFunction: SHA1}\n", `conf.loadBalancer.ringHash.hashFunction: must be one of XX_HASH, MURMUR_HASH_2 (value "SHA1")`},
		{"a ring beyond Envoy's limit", "    ringHash: {maxRingSize: 8388609}\n", `conf.loadBalancer.ringHash.maxRingSize: expected a ring size, 1 to 8388608`},
		{"min above max", "    ringHash: {minRingSize: 4096, maxRingSize: 2048}\n", `conf.loadBalancer.ringHash.minRingSize: must not exceed maxRingSize (2048) (value "4096")`},
		{"max below the default min", "    ringHash: {maxRingSize: 512}\n", `conf.loadBalancer.ringHash.maxRingSize: is below minRingSize's default 1024`},
		{"a misplaced setting", "    random: {choiceCount: 3}\n", `conf.loadBalancer.random.choiceCount: unknown setting of random (it has none: random: {})`},
		{"a misspelt setting", "    leastRequest: {choiceCnt: 3}\n", `conf.loadBalancer.leastRequest.choiceCnt: unknown setting of leastRequest (known: choiceCount)`},
		{"settings not a mapping", "    maglev: fast\n", `conf.loadBalancer.maglev: expected a mapping (e.g. maglev: {})`},
	} {
		_, err := Decode("route.yaml", []byte(withLB(tc.lb)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error with %q", tc.name, err, tc.want)
		}
	}
}
