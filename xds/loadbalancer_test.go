package xds

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
)

// A TrafficRoute's conf.loadBalancer (Kuma's) is the load balancer of the clusters its
// split sends to, with its settings; the hashing ones hash the client's address (a TCP
// connection's only key). The resources pass Envoy's own validation rules.
func TestRouteLoadBalancers(t *testing.T) {
	for _, tc := range []struct {
		lb, cluster string
		policy      cluster.Cluster_LbPolicy
		check       func(*cluster.Cluster) string
		hash        bool
	}{
		{`{"roundRobin":{}}`, "backend{version=2}", cluster.Cluster_ROUND_ROBIN, nil, false},
		{`{"leastRequest":{}}`, "backend{version=2}{leastRequest}", cluster.Cluster_LEAST_REQUEST,
			func(c *cluster.Cluster) string {
				if c.GetLeastRequestLbConfig() != nil {
					return "settings given where Envoy's defaults were asked for"
				}
				return ""
			}, false},
		{`{"leastRequest":{"choiceCount":5}}`, "backend{version=2}{leastRequest:5}", cluster.Cluster_LEAST_REQUEST,
			func(c *cluster.Cluster) string {
				if n := c.GetLeastRequestLbConfig().GetChoiceCount().GetValue(); n != 5 {
					return fmt.Sprintf("choice count %d, want 5", n)
				}
				return ""
			}, false},
		{`{"random":{}}`, "backend{version=2}{random}", cluster.Cluster_RANDOM, nil, false},
		{`{"maglev":{}}`, "backend{version=2}{maglev}", cluster.Cluster_MAGLEV, nil, true},
		{`{"ringHash":{}}`, "backend{version=2}{ringHash}", cluster.Cluster_RING_HASH, nil, true},
		{`{"ringHash":{"hashFunction":"MURMUR_HASH_2","minRingSize":64,"maxRingSize":4096}}`, "backend{version=2}{ringHash:MURMUR_HASH_2:64:4096}", cluster.Cluster_RING_HASH,
			func(c *cluster.Cluster) string {
				rh := c.GetRingHashLbConfig()
				if rh.GetHashFunction() != cluster.Cluster_RingHashLbConfig_MURMUR_HASH_2 || rh.GetMinimumRingSize().GetValue() != 64 || rh.GetMaximumRingSize().GetValue() != 4096 {
					return "ring hash settings " + rh.String()
				}
				return ""
			}, true},
	} {
		t.Run(tc.lb, func(t *testing.T) {
			tr := trafficRoute("canary", 0, tags("service", "mobile"), tags("service", "backend"),
				to(90, tags("service", "backend", "version", "2")), to(10, tags("service", "db")))
			tr.LoadBalancer = json.RawMessage(tc.lb)
			r := generateValid(t, mobile(tags("service", "mobile")), append(backends(), tr), tproxy)
			split := splitOf(t, r, "outbound:240.0.0.1:80")
			if len(split) != 2 || split[0] != tc.cluster+":90" || !strings.HasPrefix(split[1], "db") {
				t.Fatalf("split = %v, want %s:90 first", split, tc.cluster)
			}
			var c *cluster.Cluster
			for _, x := range r.Clusters {
				if x.Name == tc.cluster {
					c = x
				}
			}
			if c == nil || c.LbPolicy != tc.policy {
				t.Fatalf("cluster %q: %v, want load balancer %v", tc.cluster, c, tc.policy)
			}
			if tc.check != nil {
				if msg := tc.check(c); msg != "" {
					t.Error(msg)
				}
			}
			// The outbound of db, not routed by this rule, keeps the plain cluster.
			if got := splitOf(t, r, "outbound:240.0.0.2:5432"); len(got) != 1 || got[0] != "db" {
				t.Errorf("db's own outbound goes to %v, want the round robin cluster db", got)
			}
			var tp tcpproxy.TcpProxy
			for _, l := range r.Listeners {
				if l.Name == "outbound:240.0.0.1:80" {
					if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(&tp); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := len(tp.HashPolicy) == 1 && tp.HashPolicy[0].GetSourceIp() != nil; got != tc.hash {
				t.Errorf("tcp_proxy hash policy on the source IP: %v, want %v (%v)", got, tc.hash, tp.HashPolicy)
			}
		})
	}
}

// One destination reached through two routes balancing it differently: a cluster each, and
// each outbound keeps its route's balancing.
func TestRouteLoadBalancersShareNoCluster(t *testing.T) {
	a := trafficRoute("to-backend", 0, tags("service", "mobile"), tags("service", "backend"), to(1, tags("service", "db")))
	a.LoadBalancer = json.RawMessage(`{"random":{}}`)
	b := trafficRoute("to-db", 0, tags("service", "mobile"), tags("service", "db"), to(1, tags("service", "db")))
	b.LoadBalancer = json.RawMessage(`{"leastRequest":{}}`)
	r := generateValid(t, mobile(tags("service", "mobile")), append(backends(), a, b), tproxy)
	if got := strings.Join(splitOf(t, r, "outbound:240.0.0.1:80"), " "); got != "db{random}:1" {
		t.Errorf("backend's outbound: %s", got)
	}
	if got := strings.Join(splitOf(t, r, "outbound:240.0.0.2:5432"), " "); got != "db{leastRequest}:1" {
		t.Errorf("db's outbound: %s", got)
	}
	eps := map[string]int{}
	for _, e := range r.Endpoints {
		eps[e.ClusterName] = len(e.Endpoints[0].GetLbEndpoints())
	}
	if eps["db{random}"] != 1 || eps["db{leastRequest}"] != 1 {
		t.Errorf("endpoints per cluster: %v", eps)
	}
}

// A load balancer written with Envoy's defaults spelt out is the same cluster as one
// leaving them out: same name, same content, whichever route builds it first.
func TestRouteLoadBalancerDefaultsSpeltOut(t *testing.T) {
	var built []*cluster.Cluster
	for _, lb := range []string{`{"ringHash":{}}`, `{"ringHash":{"hashFunction":"XX_HASH","minRingSize":1024,"maxRingSize":8388608}}`,
		`{"leastRequest":{}}`, `{"leastRequest":{"choiceCount":2}}`} {
		tr := trafficRoute("r", 0, tags("service", "mobile"), tags("service", "backend"), to(1, tags("service", "db")))
		tr.LoadBalancer = json.RawMessage(lb)
		r := generateValid(t, mobile(tags("service", "mobile")), append(backends(), tr), tproxy)
		for _, c := range r.Clusters {
			if strings.HasPrefix(c.Name, "db{") {
				built = append(built, c)
			}
		}
	}
	if len(built) != 4 {
		t.Fatalf("clusters: %v", built)
	}
	for i := 0; i < 4; i += 2 {
		if a, b := built[i], built[i+1]; a.Name != b.Name || !proto.Equal(a, b) {
			t.Errorf("defaults spelt out give another cluster:\n%v\n%v", a, b)
		}
	}
}
