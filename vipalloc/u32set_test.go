package vipalloc

import (
	"math/rand/v2"
	"testing"
)

// TestU32Set checks the set against a map through random adds and removes over a small key
// range (long probe runs, wrap-around, shifts back on remove) and a growing one.
func TestU32Set(t *testing.T) {
	for _, keys := range []uint32{64, 5000} {
		var s u32set
		ref := map[uint32]bool{}
		r := rand.New(rand.NewPCG(1, uint64(keys)))
		for op := 0; op < 50000; op++ {
			k := 1 + r.Uint32N(keys)
			if r.IntN(3) == 0 {
				s.remove(k)
				delete(ref, k)
			} else if added := s.add(k); added == ref[k] {
				t.Fatalf("keys %d op %d: add(%d) = %v, but present = %v", keys, op, k, added, ref[k])
			} else {
				ref[k] = true
			}
			if s.len() != len(ref) {
				t.Fatalf("keys %d op %d: len = %d, want %d", keys, op, s.len(), len(ref))
			}
			if op%997 == 0 {
				for x := uint32(1); x <= keys; x++ {
					if s.has(x) != ref[x] {
						t.Fatalf("keys %d op %d: has(%d) = %v, want %v", keys, op, x, s.has(x), ref[x])
					}
				}
			}
		}
	}
}

// The set of taken addresses is at most 7/8 full: 100,000 addresses in 131,072 slots (512
// KiB, where at most half full took 1 MiB), and it grows only past 7/8.
func TestU32SetDense(t *testing.T) {
	var s u32set
	s.reserve(100000)
	for k := uint32(1); k <= 100000; k++ {
		s.add(k * 7919)
	}
	if len(s.slots) != 1<<17 {
		t.Errorf("100,000 addresses in %d slots, want %d", len(s.slots), 1<<17)
	}
	for k := uint32(100001); k <= 114688; k++ { // 7/8 of 1<<17
		s.add(k * 7919)
	}
	if len(s.slots) != 1<<17 {
		t.Errorf("114,688 addresses in %d slots, want %d", len(s.slots), 1<<17)
	}
	if s.add(114689 * 7919); len(s.slots) != 1<<18 {
		t.Errorf("one more: %d slots, want %d", len(s.slots), 1<<18)
	}
}
