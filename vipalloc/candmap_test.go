package vipalloc

import "testing"

// TestCandMapCollision forces two keys onto one hash: both stay reachable, and removing
// either leaves the other.
func TestCandMapCollision(t *testing.T) {
	for _, first := range []int{0, 1} {
		m := newCandMap(0)
		a, b := &candidate{}, &candidate{}
		a.Key, b.Key = "p{k=a}", "p{k=b}"
		h := keyHash([]byte(a.Key))
		m.put(h, a)
		m.put(h, b) // as if b's key hashed to h too
		if m.get(h, []byte(a.Key)) != a || m.get(h, []byte(b.Key)) != b || m.len() != 2 {
			t.Fatalf("after two puts on one hash: get a = %p, get b = %p, len %d", m.get(h, []byte(a.Key)),
				m.get(h, []byte(b.Key)), m.len())
		}
		gone, kept := a, b
		if first == 1 {
			gone, kept = b, a
		}
		m.del(gone)
		if m.get(h, []byte(kept.Key)) != kept || m.get(h, []byte(gone.Key)) != nil || m.len() != 1 {
			t.Errorf("removing %s: kept %s lost or removed still there (len %d)", gone.Key, kept.Key, m.len())
		}
		n := 0
		m.each(func(*candidate) { n++ })
		if n != 1 {
			t.Errorf("each visited %d, want 1", n)
		}
	}
}
