package xds

import (
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// A service named like one of the agent's own clusters shared that cluster: a dataplane whose
// service was "localhost:8080" took the inbound traffic of every dataplane whose application
// listens on 8080 (or had its own traffic sent to the local application), one named
// "meshexternalservice_payments" took the external service's. Each keeps its own cluster,
// and the outbound to the service still reaches the service's endpoints.
func TestServiceNamedLikeAnOwnCluster(t *testing.T) {
	self := dataplane("mobile-1", "10.0.0.1", inbound(8080, tags("service", "mobile")))
	self.Networking.Inbound[0].ServicePort = 18080
	pay := mesExample("payments", nil, mesh.MESEndpoint{Address: "203.0.113.7", Port: 443})
	for _, svc := range []string{"localhost:18080", "10.0.0.1:18080", "outbound:passthrough", "inbound:passthrough", MESClusterPrefix + "payments", "kuma-dp-xds"} {
		t.Run(svc, func(t *testing.T) {
			res := append(backends(), pay, dataplane("evil", "10.0.9.9", inbound(9000, tags("service", svc))))
			s, err := mesh.NewSnapshot(self, res)
			if err != nil {
				t.Fatal(err)
			}
			table := defaultTable(serviceEntry("evil.mesh", "240.0.0.9", "fd00:fd00::9", 9000, tags(mesh.ServiceTag, svc)),
				mesEntry("payments", "241.0.0.1", "fd00:fd01::1", 443))
			r, err := Generate(s, table, tproxy)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Validate(); err != nil {
				t.Fatal(err)
			}
			clusters := map[string]string{}
			for _, c := range r.Clusters {
				clusters[c.Name] = c.GetType().String()
			}
			// The agent's own clusters keep their kind.
			for name, want := range map[string]string{"localhost:18080": "STATIC", outboundCaptureName: "ORIGINAL_DST",
				inboundCaptureName: "ORIGINAL_DST", MESClusterPrefix + "payments": "STATIC"} {
				if got, ok := clusters[name]; ok && got != want {
					t.Errorf("cluster %q is %s, want %s: the service took it", name, got, want)
				}
			}
			if clusters[svc+"{}"] != "EDS" {
				t.Errorf("no EDS cluster %q for the service; clusters: %v", svc+"{}", clusters)
			}
			if got := strings.Join(splitOf(t, r, "outbound:240.0.0.9:9000"), " "); got != svc+"{}" {
				t.Errorf("outbound to the service goes to %q, want %q", got, svc+"{}")
			}
			var eps []string
			for _, e := range r.Endpoints {
				if e.ClusterName == svc+"{}" {
					for _, le := range e.Endpoints[0].LbEndpoints {
						eps = append(eps, le.GetEndpoint().Address.GetSocketAddress().Address)
					}
				}
			}
			if strings.Join(eps, " ") != "10.0.9.9" {
				t.Errorf("the service's endpoints = %v, want 10.0.9.9", eps)
			}
		})
	}
}
