package vipalloc

import (
	"slices"
	"sort"
	"strings"
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

// settle replaces the entries of hs and returns its previous available entry.
func (a *Allocator) settle(st *settler, hs *hostState) *Entry {
	for _, e := range hs.entries {
		st.sub(e)
	}
	oldAvail := hs.avail
	hs.entries, hs.avail = nil, nil
	if len(hs.cands) > 0 {
		hs.entries, hs.avail = a.entriesFor(hs, &st.slab)
	} else {
		st.empty = append(st.empty, hs)
	}
	for _, e := range hs.entries {
		st.add(e)
	}
	return oldAvail
}

func (a *Allocator) finishSettle(st *settler) {
	a.sum[0] += st.sum[0]
	a.sum[1] += st.sum[1]
	for _, hs := range st.empty {
		delete(a.hosts[shardOf(hs.host)], hs.host)
	}
}

// settleParallel settles touched in two halves on two goroutines (full builds only: no
// index changes to record).
func (a *Allocator) settleParallel(touched []*hostState, repl [][]*Entry) {
	var sts [2]settler
	mid := len(touched) / 2
	done := make(chan struct{})
	run := func(st *settler, lo, hi int) {
		for i := lo; i < hi; i++ {
			a.settle(st, touched[i])
			repl[i] = touched[i].entries
		}
	}
	go func() {
		defer close(done)
		run(&sts[1], mid, len(touched))
	}()
	run(&sts[0], 0, mid)
	<-done
	a.finishSettle(&sts[0])
	a.finishSettle(&sts[1])
}

// mergeEntries replaces, in prev (sorted by hostname then key), the entries of each touched
// hostname (sorted) by repl[i].
func mergeEntries(prev []*Entry, touched []*hostState, repl [][]*Entry) []*Entry {
	n := len(prev)
	for _, r := range repl {
		n += len(r)
	}
	out := make([]*Entry, 0, n)
	i := 0
	for k, hs := range touched {
		h := hs.host
		j := i + sort.Search(len(prev)-i, func(x int) bool { return prev[i+x].Hostname >= h })
		out = append(out, prev[i:j]...)
		for j < len(prev) && prev[j].Hostname == h {
			j++
		}
		out = append(out, repl[k]...)
		i = j
	}
	return append(out, prev[i:]...)
}

// sortHosts sorts hostnames by name; large lists in two halves on two goroutines, merged.
func sortHosts(hs []*hostState) {
	cmp := func(x, y *hostState) int { return strings.Compare(x.host, y.host) }
	if len(hs) < parallelWork {
		slices.SortFunc(hs, cmp)
		return
	}
	mid := len(hs) / 2
	done := make(chan struct{})
	go func() {
		defer close(done)
		slices.SortFunc(hs[mid:], cmp)
	}()
	slices.SortFunc(hs[:mid], cmp)
	<-done
	merged := make([]*hostState, 0, len(hs))
	i, j := 0, mid
	for i < mid && j < len(hs) {
		if cmp(hs[j], hs[i]) < 0 {
			merged = append(merged, hs[j])
			j++
		} else {
			merged = append(merged, hs[i])
			i++
		}
	}
	merged = append(append(merged, hs[i:mid]...), hs[j:]...)
	copy(hs, merged)
}
