package vipalloc

import (
	"fmt"
	"slices"
	"testing"
)

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

// TestHostMapCollision does the same for hostnames: two names on one hash are both found,
// by name, and dropping either leaves the other.
func TestHostMapCollision(t *testing.T) {
	m := newHostMap(0)
	h := hostHash("a.mesh")
	a := m.add(h, &candidate{Entry: Entry{hostname: "a.mesh"}})
	b := m.add(h, &candidate{Entry: Entry{hostname: "b.mesh"}}) // as if b.mesh hashed to h too
	if m.get(h, a.host()) != a || m.get(h, b.host()) != b || m.len() != 2 || a == b {
		t.Fatalf("after two adds on one hash: len %d", m.len())
	}
	m.del(h, a)
	if m.get(h, hostName{head: "b.mesh"}) != b || m.get(h, hostName{head: "a.mesh"}) != nil || m.len() != 1 {
		t.Errorf("after removing a.mesh: b.mesh lost or a.mesh still there (len %d)", m.len())
	}
	m.del(h, b)
	n := 0
	m.each(func(*hostState) { n++ })
	if n != 0 || m.len() != 0 {
		t.Errorf("after removing both: each visited %d, len %d", n, m.len())
	}
}

// A hostMap agrees with a Go map through adds, drops (their places and slots reused) and
// growth, its states staying where they were made.
func TestHostMapAgreesWithMap(t *testing.T) {
	m := newHostMap(0)
	want := map[string]*hostState{}
	name := func(i int) string { return fmt.Sprintf("svc-%d.mesh", i) }
	check := func(when string) {
		t.Helper()
		if m.len() != len(want) {
			t.Fatalf("%s: len %d, want %d", when, m.len(), len(want))
		}
		seen := 0
		m.each(func(hs *hostState) {
			seen++
			if want[hs.name()] != hs {
				t.Fatalf("%s: each gave %s at %p, want %p", when, hs.name(), hs, want[hs.name()])
			}
		})
		if seen != len(want) {
			t.Fatalf("%s: each visited %d, want %d", when, seen, len(want))
		}
		for i := 0; i < 3000; i++ {
			if got := m.get(hostHash(name(i)), hostName{head: name(i)}); got != want[name(i)] {
				t.Fatalf("%s: get(%s) = %p, want %p", when, name(i), got, want[name(i)])
			}
			if got := findHost(&m, hostHash(name(i)), []byte(name(i))); got != want[name(i)] {
				t.Fatalf("%s: findHost(%s) = %p, want %p", when, name(i), got, want[name(i)])
			}
		}
	}
	for i := 0; i < 2000; i++ {
		want[name(i)] = m.add(hostHash(name(i)), &candidate{Entry: Entry{hostname: name(i)}})
	}
	check("after 2000 adds")
	for i := 0; i < 2000; i += 3 {
		hs := want[name(i)]
		m.del(hostHash(name(i)), hs)
		delete(want, name(i))
		if hs.name() != name(i) {
			t.Fatalf("a dropped state reads %q before the next round, want %q", hs.name(), name(i))
		}
	}
	check("after dropping a third")
	m.reclaim()
	used := m.used
	for i := 2000; i < 3000; i++ { // takes the dropped places first, then grows
		want[name(i)] = m.add(hostHash(name(i)), &candidate{Entry: Entry{hostname: name(i)}})
	}
	check("after 1000 more")
	if m.used != used+1000-667 {
		t.Errorf("%d places handed out, want %d (the 667 dropped ones reused)", m.used, used+1000-667)
	}
	// Churn: drops and adds of the same names leave tombs; the index is rebuilt in place.
	for round := 0; round < 20; round++ {
		for i := 1; i < 2000; i += 3 {
			m.del(hostHash(name(i)), want[name(i)])
			want[name(i)] = m.add(hostHash(name(i)), &candidate{Entry: Entry{hostname: name(i)}})
		}
		m.reclaim()
	}
	check("after churn")
	if len(m.slots) > 4096 {
		t.Errorf("%d slots for %d names after churn, want <= 4096", len(m.slots), m.len())
	}
}

// The index costs at most 4 bytes x 2 x 8/7 (9.2) a hostname at any size (the map it
// replaced: ~23).
func TestHostMapBytesPerName(t *testing.T) {
	for _, n := range []int{1000, 50000, 57345, 60000} {
		m := newHostMap(0)
		for i := 0; i < n; i++ {
			h := fmt.Sprintf("svc-%d.mesh", i)
			m.add(hostHash(h), &candidate{Entry: Entry{hostname: h}})
		}
		if per := float64(4*len(m.slots)) / float64(n); per > 9.2 {
			t.Errorf("%d names: %d slots, %.1f bytes a name", n, len(m.slots), per)
		}
	}
}

// settled gives each touched hostname its entries, across the two halves of a parallel
// settle, whatever their numbers; mergeEntries puts them in place of the old ones.
func TestSettledAndMerge(t *testing.T) {
	e := func(h, k string) *Entry { return NewEntry(EntryData{Hostname: h, Key: k}) }
	a1, b1, b2, c1, d1, d2, d3 := e("a", "1"), e("b", "1"), e("b", "2"), e("c", "1"), e("d", "1"), e("d", "2"), e("d", "3")
	s := newSettled(4, 2)
	s.parts[0].add([]*Entry{a1})
	s.parts[0].add([]*Entry{b1, b2})
	s.parts[1].add(nil) // c lost its entries
	s.parts[1].add([]*Entry{d1, d2, d3})
	want := [][]*Entry{{a1}, {b1, b2}, {}, {d1, d2, d3}}
	for k, w := range want {
		if got := s.of(k); !slices.Equal(got, w) {
			t.Errorf("of(%d) = %v, want %v", k, got, w)
		}
	}
	if s.len() != 6 {
		t.Errorf("len %d, want 6", s.len())
	}
	touched := []*hostState{newHostState(&candidate{Entry: Entry{hostname: "a"}}), newHostState(&candidate{Entry: Entry{hostname: "b"}}),
		newHostState(&candidate{Entry: Entry{hostname: "c"}}), newHostState(&candidate{Entry: Entry{hostname: "d"}})}
	old := e("b", "0")
	prev := []*Entry{e("a", "0"), old, c1, e("e", "1")}
	got := mergeEntries(prev, touched, s)
	if names := hostnamesOf(got); !slices.Equal(names, []string{"a", "b", "b", "d", "d", "d", "e"}) || got[1] != b1 || got[3] != d1 {
		t.Errorf("merged %v", names)
	}
}

func hostnamesOf(es []*Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Hostname())
	}
	return out
}
