package vipalloc

import (
	"cmp"
	"slices"
	"sort"
)

// Settling touched hostnames into entries, and keeping the sorted entry list, on one or two
// goroutines.

// settler computes the entries of touched hostnames; several run concurrently on disjoint
// hostnames in full builds (each candidate belongs to one hostname).
type settler struct {
	sum   [2]uint64 // change of the table hash sum
	slab  []*Entry
	empty []*hostState // hostnames left without candidates
}

func (st *settler) add(e *Entry) {
	s := entrySum(e, false)
	st.sum[0] += s[0]
	st.sum[1] += s[1]
}

func (st *settler) sub(e *Entry) {
	s := entrySum(e, false)
	st.sum[0] -= s[0]
	st.sum[1] -= s[1]
}

// settle replaces the entries of hs and returns them (sorted by key) and its previous
// available entry.
func (a *Allocator) settle(st *settler, hs *hostState) (es []*Entry, oldAvail *Entry) {
	for i := range hs.numEntries() {
		st.sub(hs.entry(i))
	}
	oldAvail = hs.avail()
	hs.setEntries(nil)
	if len(hs.cands()) > 0 {
		es, _ = a.entriesFor(hs, &st.slab)
		hs.setEntries(es)
	} else {
		st.empty = append(st.empty, hs)
	}
	for _, e := range es {
		st.add(e)
	}
	return es, oldAvail
}

func (a *Allocator) finishSettle(st *settler) {
	a.sum[0] += st.sum[0]
	a.sum[1] += st.sum[1]
	for _, hs := range st.empty {
		h := hs.host().hash()
		a.hosts[h%hostShards].del(h, hs)
	}
}

// settled holds the new entries of each touched hostname, in touched's order: those of
// touched[k] are part k/mid's list between two ends. Two flat lists (one per half of a
// parallel settle; the second empty otherwise) cost ~12 bytes a hostname where a list per
// hostname took 24 for its slice alone, at the moment a full build holds the most.
type settled struct {
	mid   int // the first hostname of part 1
	parts [2]settledPart
}

type settledPart struct {
	flat []*Entry
	ends []int32 // ends[k]: the end of hostname k's entries in flat
}

func newSettled(n, mid int) *settled {
	s := &settled{mid: mid}
	s.parts[0] = settledPart{flat: make([]*Entry, 0, mid+mid/8), ends: make([]int32, 0, mid)}
	s.parts[1] = settledPart{flat: make([]*Entry, 0, n-mid+(n-mid)/8), ends: make([]int32, 0, n-mid)}
	return s
}

func (p *settledPart) add(es []*Entry) {
	p.flat = append(p.flat, es...)
	p.ends = append(p.ends, int32(len(p.flat)))
}

// of returns the entries of touched hostname k.
func (s *settled) of(k int) []*Entry {
	p := &s.parts[0]
	if k >= s.mid {
		p, k = &s.parts[1], k-s.mid
	}
	lo := int32(0)
	if k > 0 {
		lo = p.ends[k-1]
	}
	return p.flat[lo:p.ends[k]]
}

func (s *settled) len() int { return len(s.parts[0].flat) + len(s.parts[1].flat) }

// settleParallel settles touched in two halves on two goroutines (full builds only: no
// index changes to record).
func (a *Allocator) settleParallel(touched []*hostState) *settled {
	var sts [2]settler
	mid := len(touched) / 2
	out := newSettled(len(touched), mid)
	done := make(chan struct{})
	run := func(st *settler, p *settledPart, lo, hi int) {
		for i := lo; i < hi; i++ {
			es, _ := a.settle(st, touched[i])
			p.add(es)
		}
	}
	go func() {
		defer close(done)
		run(&sts[1], &out.parts[1], mid, len(touched))
	}()
	run(&sts[0], &out.parts[0], 0, mid)
	<-done
	a.finishSettle(&sts[0])
	a.finishSettle(&sts[1])
	return out
}

// mergeEntries replaces, in prev (sorted by hostname then key), the entries of each touched
// hostname (sorted) by repl's.
func mergeEntries(prev []*Entry, touched []*hostState, repl *settled) []*Entry {
	out := make([]*Entry, 0, len(prev)+repl.len())
	i := 0
	for k, hs := range touched {
		h := hs.host()
		j := i + sort.Search(len(prev)-i, func(x int) bool { return prev[i+x].host().compare(h) >= 0 })
		out = append(out, prev[i:j]...)
		for j < len(prev) && prev[j].host().equal(h) {
			j++
		}
		out = append(out, repl.of(k)...)
		i = j
	}
	return append(out, prev[i:]...)
}

// sortHosts sorts hostnames by name; large lists in two halves on two goroutines, merged.
// Large lists are sorted as pointer-free records carrying the name's first 16 bytes as two
// big-endian integers, so most comparisons are integer ones (no dereference, no byte loop);
// equal prefixes fall back to comparing the names.
func sortHosts(hs []*hostState) {
	if len(hs) < 1024 {
		slices.SortFunc(hs, func(x, y *hostState) int { return x.host().compare(y.host()) })
		return
	}
	recs := make([]hostRec, len(hs))
	for i, h := range hs {
		n := h.host()
		recs[i] = hostRec{k0: prefix8(n, 0), k1: prefix8(n, 8), i: int32(i)}
	}
	byName := func(x, y hostRec) int {
		switch {
		case x.k0 != y.k0:
			return cmp.Compare(x.k0, y.k0)
		case x.k1 != y.k1:
			return cmp.Compare(x.k1, y.k1)
		}
		return hs[x.i].host().compare(hs[y.i].host())
	}
	if len(hs) < parallelWork {
		slices.SortFunc(recs, byName)
	} else {
		mid := len(recs) / 2
		both(func() { slices.SortFunc(recs[:mid], byName) }, func() { slices.SortFunc(recs[mid:], byName) })
		merged := make([]hostRec, 0, len(recs))
		i, j := 0, mid
		for i < mid && j < len(recs) {
			if byName(recs[j], recs[i]) < 0 {
				merged = append(merged, recs[j])
				j++
			} else {
				merged = append(merged, recs[i])
				i++
			}
		}
		recs = append(append(merged, recs[i:mid]...), recs[j:]...)
	}
	sorted := make([]*hostState, len(hs))
	for k, r := range recs {
		sorted[k] = hs[r.i]
	}
	copy(hs, sorted)
}

// hostRec is a hostname to sort: bytes 0-7 and 8-15 of the name (zero-padded, big-endian:
// integer order is byte order) and its index in the list.
type hostRec struct {
	k0, k1 uint64
	i      int32
}

func prefix8(n hostName, from int) uint64 {
	var k uint64
	for j := from; j < from+8; j++ {
		k <<= 8
		if j < n.len() {
			k |= uint64(n.at(j))
		}
	}
	return k
}
