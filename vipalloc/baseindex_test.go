package vipalloc

import (
	"fmt"
	"net/netip"
	"testing"
)

// TestBaseIndexMisses checks that the open-addressing indexes of a large table answer
// "no" for names and VIPs it does not hold (hits are checked by checkTable), and that a
// hand-built table with a VIP shared by two names answers PTR with the first name.
func TestBaseIndexMisses(t *testing.T) {
	tb := allocate(t, newAlloc(t, nil), snap(bigMesh(1500), designVOs()))
	held := map[uint32]bool{}
	for _, e := range tb.Available() {
		held[v4u(e.IPv4())] = true
	}
	for i := 0; i < 5000; i++ {
		for _, name := range []string{fmt.Sprintf("svc-%05d.mesh", 1500+i), fmt.Sprintf("v9.svc-%05d.mesh", i),
			fmt.Sprintf("svc-%05d.zone-3.mesh", i)} {
			if e, ok := tb.Lookup(name); ok {
				t.Fatalf("Lookup(%s) = %s, want none", name, e.Key())
			}
		}
	}
	p := DefaultConfig().ServiceCIDR
	base := v4u(netip.MustParsePrefix(p).Addr())
	misses := 0
	for v := base + 1; misses < 5000; v++ {
		if held[v] {
			continue
		}
		misses++
		if e, ok := tb.LookupAddr(u4(v)); ok {
			t.Fatalf("LookupAddr(%s) = %s, want none", u4(v), e.Hostname())
		}
	}

	shared := netip.MustParseAddr("241.0.0.9")
	hand := NewTable([]*Entry{
		NewEntry(EntryData{Hostname: "b.ext", IPv4: shared, Ports: []uint32{80}, Key: "b", Status: Available}),
		NewEntry(EntryData{Hostname: "a.ext", IPv4: shared, Ports: []uint32{80}, Key: "a", Status: Available}),
	}, nil)
	if e, ok := hand.LookupAddr(shared); !ok || e.Hostname() != "a.ext" {
		t.Errorf("LookupAddr(%s) = %v, %v; want a.ext", shared, e, ok)
	}
	if hand.Len() != 2 {
		t.Errorf("Len = %d, want 2", hand.Len())
	}
}

// The VIPs' index is at most 7/8 full (PTR questions only), the names' at most half (9,000
// names: 16,384 VIP slots, 32,768 name slots; the VIPs' took 32,768 too before), and every
// VIP still answers PTR with its entry.
func TestBaseIndexSizes(t *testing.T) {
	tb := allocate(t, newAlloc(t, nil), snap(bigMesh(1500), designVOs()))
	n := tb.base.count
	names, addrs := len(tb.base.names), len(tb.base.addrs)
	if names < 2*n || names >= 4*n {
		t.Errorf("%d names in %d name slots, want at most half full (and no larger)", n, names)
	}
	if addrs*7/8 < n || addrs >= 2*n*8/7 {
		t.Errorf("%d names in %d VIP slots, want at most 7/8 full (and no larger)", n, addrs)
	}
	for _, e := range tb.Available() {
		if got, ok := tb.LookupAddr(e.IPv4()); !ok || got.IPv4() != e.IPv4() {
			t.Fatalf("LookupAddr(%s) = %v, %v", e.IPv4(), got, ok)
		}
	}
}
