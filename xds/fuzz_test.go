package xds

import (
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// FuzzMeshExternalServiceEndpoint: endpoint addresses and TLS names come from users; any
// value gives either a problem or resources that pass Envoy's validation.
func FuzzMeshExternalServiceEndpoint(f *testing.F) {
	f.Add("example.com", uint32(443), "Exact", "example.com", "TLS12", "TLS13")
	f.Add("1.2.3.4", uint32(0), "Prefix", "spiffe://x", "", "")
	f.Add("unix:///run/x.sock", uint32(0), "", "", "TLSAuto", "TLS10")
	f.Add("-bad-.com", uint32(70000), "Regex", "", "TLS14", "")
	f.Fuzz(func(t *testing.T, addr string, port uint32, sanType, san, min, max string) {
		tls := &mesh.MESTLS{Version: &mesh.MESTLSVersion{Min: min, Max: max},
			Verification: &mesh.MESVerification{SubjectAltNames: []mesh.SANMatch{{Type: sanType, Value: san}}}}
		for _, tl := range []*mesh.MESTLS{nil, tls} {
			m := mesExample("fuzz", tl, mesh.MESEndpoint{Address: addr, Port: port})
			self := dataplane("me", "10.0.0.1", inbound(8080, tags(mesh.ServiceTag, "me")))
			self.Networking.Extra().Outbound = []mesh.Outbound{{Port: 9000, BackendRef: &mesh.BackendRef{Kind: mesh.KindMeshExternalService, Name: "fuzz"}}}
			s, err := mesh.NewSnapshot(self, []mesh.Resource{m})
			if err != nil {
				t.Fatal(err)
			}
			r, err := Generate(s, nil, Options{CABundle: "/etc/ssl/certs/ca-certificates.crt"})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("address %q port %d san %q/%q versions %q-%q: invalid resources reached the output: %v", addr, port, sanType, san, min, max, err)
			}
		}
	})
}
