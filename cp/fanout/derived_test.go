package fanout

import (
	"log/slog"
	"testing"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// Derived documents are served beside the store's, to every mesh, from the first store read
// on; a new set replaces the old one; a DNSZone written to the store is never served.
func TestDerivedServedBesideTheStore(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	cp := New(nil, log)
	f := NewFeed(nil, cp, log)
	zone := func(name, body string) Doc {
		return Doc{Kind: mesh.KindDNSZone, Name: name, Meshless: true, Body: []byte(body)}
	}
	f.SetDerived(mesh.KindDNSZone, []Doc{zone("a.test", "one")})
	if got := cp.current.ForMesh("default", mesh.KindDNSZone); len(got) != 0 {
		t.Fatalf("served before the store was read: %v", got)
	}
	stored := []cpstore.Item{
		{Key: cpstore.Key{Mesh: "default", Type: mesh.KindDataplane, Name: "web-1"},
			Doc: []byte("type: Dataplane\nmesh: default\nname: web-1\nnetworking:\n  address: 10.0.0.1\n  inbound:\n  - port: 80\n    tags: {kuma.io/service: web}\n")},
		{Key: cpstore.Key{Mesh: "default", Type: mesh.KindDNSZone, Name: "evil.test"},
			Doc: []byte("type: DNSZone\nname: evil.test\norigin: evil.test\nzone: \"@ 30 IN SOA a. b. 1 2 3 4 5\"\n")},
	}
	// no derived set yet (the zones not built): the stored DNSZone is not served either
	bare := NewFeed(nil, New(nil, log), log)
	bare.applyStore(bare.load(stored))
	if got := bare.cp.current.ForMesh("default", mesh.KindDNSZone); len(got) != 0 {
		t.Fatalf("a DNSZone from the store served: %v", got)
	}
	f.applyStore(f.load(stored))
	for _, m := range []string{"default", "other"} {
		got := cp.current.ForMesh(m, mesh.KindDNSZone)
		if len(got) != 1 || string(got["a.test"]) != "one" {
			t.Fatalf("mesh %s: zones served %v, want a.test only", m, got)
		}
	}
	if got := cp.current.ForMesh("default", mesh.KindDataplane); len(got) != 1 {
		t.Fatalf("the store's dataplane: %v", got)
	}
	f.SetDerived(mesh.KindDNSZone, []Doc{zone("b.test", "two")})
	if got := cp.current.ForMesh("default", mesh.KindDNSZone); len(got) != 1 || string(got["b.test"]) != "two" {
		t.Fatalf("after the new set: %v", got)
	}
	if got := cp.current.ForMesh("default", mesh.KindDataplane); len(got) != 1 {
		t.Fatalf("the store's dataplane after the new set: %v", got)
	}
	f.SetDerived(mesh.KindDNSZone, nil)
	if got := cp.current.ForMesh("default", mesh.KindDNSZone); len(got) != 0 {
		t.Fatalf("after no zones: %v", got)
	}
}
