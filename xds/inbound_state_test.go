package xds

import (
	"slices"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// Kuma's inbound states decide which dataplanes take traffic: a NotReady inbound, one with
// health.ready: false and an Ignored one are no endpoint of their service; a Ready one and one
// with no state are. Full and incremental generation agree.
func TestNotServingInboundsAreNoEndpoint(t *testing.T) {
	tab := vipalloc.NewTable([]*vipalloc.Entry{serviceEntry("api.mesh", "240.0.0.1", "fd00::1", 80, tags(mesh.ServiceTag, "api"))}, nil)
	self := dataplane("me", "10.9.9.9", inbound(8080, tags(mesh.ServiceTag, "me")))
	withState := func(name, addr string, f func(*mesh.Inbound)) *mesh.Dataplane {
		d := dataplane(name, addr, inbound(8080, tags(mesh.ServiceTag, "api")))
		f(&d.Networking.Inbound[0])
		return d
	}
	res := []mesh.Resource{
		withState("plain", "10.0.0.1", func(*mesh.Inbound) {}),
		withState("ready", "10.0.0.2", func(in *mesh.Inbound) {
			in.Extra().State = mesh.InboundReady
			in.Extra().Health = &mesh.InboundHealth{Ready: true}
		}),
		withState("not-ready", "10.0.0.3", func(in *mesh.Inbound) { in.Extra().State = mesh.InboundNotReady }),
		withState("unhealthy", "10.0.0.4", func(in *mesh.Inbound) { in.Extra().Health = &mesh.InboundHealth{Ready: false} }),
		withState("ignored", "10.0.0.5", func(in *mesh.Inbound) { in.Extra().State = mesh.InboundIgnored }),
	}
	s, err := mesh.NewSnapshot(self, res)
	if err != nil {
		t.Fatal(err)
	}
	addrs := func(r *Resources) []string {
		var out []string
		for _, cla := range r.Endpoints {
			for _, le := range cla.Endpoints {
				for _, e := range le.LbEndpoints {
					if a := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress(); a != "10.9.9.9" && a != "127.0.0.1" {
						out = append(out, a)
					}
				}
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	full, err := Generate(s, tab, tproxy)
	if err != nil {
		t.Fatal(err)
	}
	if got := addrs(full); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("endpoints %v, want only the serving inbounds 10.0.0.1 and 10.0.0.2", got)
	}
	// The incremental generator, from a model where every inbound serves to this one.
	gen := NewGenerator()
	all := make([]mesh.Resource, 0, len(res))
	for i := range res {
		all = append(all, withState(res[i].GetMeta().Name, res[i].(*mesh.Dataplane).Networking.Address, func(*mesh.Inbound) {}))
	}
	s0, err := mesh.NewSnapshot(self, all)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gen.Generate(s0, tab, tproxy); err != nil {
		t.Fatal(err)
	}
	inc, err := gen.Generate(s, tab, tproxy)
	if err != nil {
		t.Fatal(err)
	}
	if got := addrs(inc); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}) {
		t.Fatalf("incremental: endpoints %v, want 10.0.0.1 and 10.0.0.2", got)
	}
}
