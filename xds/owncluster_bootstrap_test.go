package xds_test

import (
	"net/netip"
	"testing"

	"github.com/kumadp/kuma-dp/bootstrap"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/tagset"
	"github.com/kumadp/kuma-dp/vipalloc"
	"github.com/kumadp/kuma-dp/xds"
)

// Envoy's bootstrap holds one static cluster, the agent's xDS server (bootstrap's
// XDSClusterName): Envoy does not let CDS replace a static cluster, so a service of that
// name had its outbound sent to the agent's xDS socket. The service's cluster is another.
func TestServiceNamedLikeTheBootstrapCluster(t *testing.T) {
	svc := bootstrap.XDSClusterName
	self := &mesh.Dataplane{Meta: mesh.Meta{Mesh: "default", Name: "mobile-1"}, Networking: mesh.Networking{Address: "10.0.0.1",
		Inbound: []mesh.Inbound{{Port: 8080, Tags: tagset.FromPairs(mesh.ServiceTag, "mobile")}}}}
	other := &mesh.Dataplane{Meta: mesh.Meta{Mesh: "default", Name: "evil"}, Networking: mesh.Networking{Address: "10.0.9.9",
		Inbound: []mesh.Inbound{{Port: 9000, Tags: tagset.FromPairs(mesh.ServiceTag, svc)}}}}
	s, err := mesh.NewSnapshot(self, []mesh.Resource{other})
	if err != nil {
		t.Fatal(err)
	}
	entry := vipalloc.NewEntry(vipalloc.EntryData{Hostname: "evil.mesh", IPv4: netip.MustParseAddr("240.0.0.9"), IPv6: netip.MustParseAddr("fd00::9"),
		Ports: []uint32{9000}, Origin: vipalloc.Origin{Kind: vipalloc.OriginService, Name: svc}, Key: "evil.mesh",
		Tags: tagset.FromPairs(mesh.ServiceTag, svc), Status: vipalloc.Available})
	r, err := xds.Generate(s, vipalloc.NewTable([]*vipalloc.Entry{entry}, nil), xds.Options{TransparentProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range r.Clusters {
		if c.Name == svc {
			t.Errorf("a cluster is named %q, as the bootstrap's static cluster", svc)
		}
		found = found || c.Name == svc+"{}"
	}
	if !found {
		t.Errorf("no cluster %q for the service", svc+"{}")
	}
}
