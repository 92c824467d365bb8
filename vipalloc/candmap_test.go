package vipalloc

import "testing"

// TestCandMapCollision forces two keys onto one hash: both stay reachable, and removing
// either leaves the other.
func TestCandMapCollision(t *testing.T) {
	for _, first := range []int{0, 1} {
		m := newCandMap(0)
		a, b := &candidate{}, &candidate{}
		a.setKey("p{k=a}")
		b.setKey("p{k=b}")
		h := keyHash([]byte(a.Key()))
		m.put(h, a)
		m.put(h, b) // as if b's key hashed to h too
		if m.get(h, []byte(a.Key())) != a || m.get(h, []byte(b.Key())) != b || m.len() != 2 {
			t.Fatalf("after two puts on one hash: get a = %p, get b = %p, len %d", m.get(h, []byte(a.Key())),
				m.get(h, []byte(b.Key())), m.len())
		}
		gone, kept := a, b
		if first == 1 {
			gone, kept = b, a
		}
		m.del(gone)
		if m.get(h, []byte(kept.Key())) != kept || m.get(h, []byte(gone.Key())) != nil || m.len() != 1 {
			t.Errorf("removing %s: kept %s lost or removed still there (len %d)", gone.Key(), kept.Key(), m.len())
		}
		n := 0
		m.each(func(*candidate) { n++ })
		if n != 1 {
			t.Errorf("each visited %d, want 1", n)
		}
	}
}

// TestHostMapCollision does the same for hostnames.
func TestHostMapCollision(t *testing.T) {
	m := newHostMap(0)
	a, b := newHostState(&candidate{Entry: Entry{Hostname: "a.mesh"}}), newHostState(&candidate{Entry: Entry{Hostname: "b.mesh"}})
	h := hostHash(a.name())
	m.put(h, a)
	m.put(h, b) // as if b.mesh hashed to h too
	if m.get(h, a.name()) != a || m.get(h, b.name()) != b || m.len() != 2 {
		t.Fatalf("after two puts on one hash: len %d", m.len())
	}
	m.del(a)
	if m.get(h, b.name()) != b || m.get(h, a.name()) != nil || m.len() != 1 {
		t.Errorf("after removing a.mesh: b.mesh lost or a.mesh still there (len %d)", m.len())
	}
	m.del(b)
	n := 0
	m.each(func(*hostState) { n++ })
	if n != 0 || m.len() != 0 {
		t.Errorf("after removing both: each visited %d, len %d", n, m.len())
	}
}
