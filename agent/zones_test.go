package agent

import (
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// zonesDNS is memDNS that also takes route zones.
type zonesDNS struct {
	*memDNS
	zones atomic.Pointer[[]*mesh.DNSZone]
}

func (d *zonesDNS) SwapZones(z []*mesh.DNSZone) error { d.zones.Store(&z); return nil }

type countingAllocator struct{ n atomic.Int32 }

func (*countingAllocator) Flush() {}

func (c *countingAllocator) Allocate(s *mesh.Snapshot) (*vipalloc.Table, error) {
	c.n.Add(1)
	return serviceAllocator{}.Allocate(s)
}

func withZone(t *testing.T, serial string) *mesh.Snapshot {
	t.Helper()
	base := snapshot(t, "backend")
	rs := []mesh.Resource{&mesh.DNSZone{Meta: mesh.Meta{Name: "shard1.apps.test"}, Origin: "shard1.apps.test",
		Zone: "$ORIGIN shard1.apps.test.\n@ 30 IN SOA ns.shard1.apps.test. h.shard1.apps.test. " + serial + " 300 60 1209600 30\n"}}
	for _, dp := range base.Dataplanes[1:] {
		rs = append(rs, dp)
	}
	s, err := mesh.NewSnapshot(base.Self, rs)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A model whose only change is a route zone (a router replica's readiness) reaches the
// resolver without a new VIP allocation (nor new Envoy resources); any other change
// allocates as before.
func TestZonesOnlyChangeSkipsAllocation(t *testing.T) {
	dns := &zonesDNS{memDNS: newMemDNS()}
	alloc := &countingAllocator{}
	a, err := New(testConfig(), Parts{Source: &memSource{}, Allocator: alloc, DNS: dns}, slog.New(slog.DiscardHandler), time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	first, second := withZone(t, "1"), withZone(t, "2")
	if first.ModelHash != second.ModelHash || first.Hash == second.Hash {
		t.Fatalf("hashes: model %s/%s, whole %s/%s", first.ModelHash, second.ModelHash, first.Hash, second.Hash)
	}
	if err := a.apply(cplink.Update{Snapshot: first}); err != nil {
		t.Fatal(err)
	}
	if err := a.apply(cplink.Update{Snapshot: second}); err != nil {
		t.Fatal(err)
	}
	if n := alloc.n.Load(); n != 1 {
		t.Fatalf("%d allocations, want 1: a zone-only change must not allocate", n)
	}
	if z := *dns.zones.Load(); len(z) != 1 || z[0] != second.DNSZones[0] {
		t.Fatal("the resolver does not hold the new zone")
	}
	if snap, _, _, _ := a.model.get(); snap != second {
		t.Fatal("the model served is not the new one")
	}
	third := snapshot(t, "backend", "db")
	if err := a.apply(cplink.Update{Snapshot: third}); err != nil {
		t.Fatal(err)
	}
	if n := alloc.n.Load(); n != 2 {
		t.Fatalf("%d allocations after a real change, want 2", n)
	}
}
