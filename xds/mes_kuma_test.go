package xds

import (
	"testing"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"

	"github.com/kumadp/kuma-dp/mesh"
)

// Kuma's MeshExternalService fields: endpoint priority becomes Envoy priorities (lowest
// first, numbered from 0), tls.verification.serverName the SNI.
func TestMESPriorityAndServerName(t *testing.T) {
	on := true
	m := &mesh.MeshExternalService{Meta: mesh.Meta{Name: "ext"}}
	m.Spec.Match = mesh.MESMatch{Port: 443} // type omitted: HostnameGenerator, as in Kuma
	m.Spec.Endpoints = []mesh.MESEndpoint{
		{Address: "10.0.0.1", Port: 443, Priority: 5},
		{Address: "10.0.0.2", Port: 443},
		{Address: "10.0.0.3", Port: 443, Priority: 5},
	}
	m.Spec.TLS = &mesh.MESTLS{Enabled: &on, Verification: &mesh.MESVerification{ServerName: "api.example.com"}}
	if err := mesh.Validate(m); err != nil {
		t.Fatalf("Kuma-valid MeshExternalService refused: %v", err)
	}
	c, rerr := mesCluster("meshexternalservice_ext", m, "/etc/ssl/certs/ca-certificates.crt")
	if rerr != nil {
		t.Fatal(rerr)
	}
	eps := c.LoadAssignment.Endpoints
	if len(eps) != 2 || eps[0].Priority != 0 || eps[1].Priority != 1 || len(eps[0].LbEndpoints) != 1 || len(eps[1].LbEndpoints) != 2 {
		t.Fatalf("priorities: %v", eps)
	}
	if a := eps[0].LbEndpoints[0].GetEndpoint().GetAddress().GetSocketAddress().GetAddress(); a != "10.0.0.2" {
		t.Fatalf("priority 0 holds %s, want the endpoint without priority (10.0.0.2)", a)
	}
	var utc tlsv3.UpstreamTlsContext
	if err := c.TransportSocket.GetTypedConfig().UnmarshalTo(&utc); err != nil {
		t.Fatal(err)
	}
	if utc.Sni != "api.example.com" {
		t.Fatalf("SNI %q, want the serverName", utc.Sni)
	}
	if err := validateDeep(c, nil); err != nil {
		t.Fatalf("not valid for Envoy: %v", err)
	}
}
