package vipalloc

import "github.com/kumadp/kuma-dp/mesh"

// selIndexMin is the number of selectors above which a policy's selectors are indexed
// (tests change it to compare the index with the scan).
var selIndexMin = 8

// selIndex finds the selectors of one policy that may match an inbound from the inbound's
// own tags, so that a policy's selectors cost what they match rather than their number for
// every inbound of the mesh (a VirtualOutbound of 50,000 selectors took 10 s beside 10,000
// dataplanes). Each selector is filed under one of its tags - the one fewest selectors of
// the policy share (key=value, or key: "*") - which every inbound it matches carries.
type selIndex struct {
	exact map[string]map[string][]int32 // key -> value -> selectors, in order
	wild  map[string][]int32            // key -> selectors filed under key: "*", in order
}

func newSelIndex(sels []compiledSel) *selIndex {
	ix := &selIndex{exact: map[string]map[string][]int32{}, wild: map[string][]int32{}}
	// Each selector is filed in the smallest bucket one of its tags offers: an exact value's
	// (key=value) or a key's ("*"), counted over all the policy's selectors.
	bucket := func(m *kv) string {
		if m.wild {
			return m.k + "\x00*"
		}
		return m.k + "\x00=" + m.v
	}
	sizes := map[string]int{}
	for i := range sels {
		for j := range sels[i].match {
			sizes[bucket(&sels[i].match[j])]++
		}
	}
	for i := range sels {
		var file *kv
		for j := range sels[i].match {
			if m := &sels[i].match[j]; file == nil || sizes[bucket(m)] < sizes[bucket(file)] {
				file = m
			}
		}
		switch {
		case file == nil: // no tag: matches nothing (validation refuses it)
		case file.wild:
			ix.wild[file.k] = append(ix.wild[file.k], int32(i))
		default:
			byVal := ix.exact[file.k]
			if byVal == nil {
				byVal = map[string][]int32{}
				ix.exact[file.k] = byVal
			}
			byVal[file.v] = append(byVal[file.v], int32(i))
		}
	}
	return ix
}

// best is the index in sels of the best selector matching in (-1: none), as the scan in
// bestSelector picks it.
func (ix *selIndex) best(sels []compiledSel, in *inbound) int {
	best := -1
	try := func(list []int32) {
		for _, i := range list {
			if s := &sels[i]; s.matches(in) && (best < 0 || betterSel(s, &sels[best]) || int(i) < best && !betterSel(&sels[best], s)) {
				best = int(i)
			}
		}
	}
	for _, tg := range in.tags {
		if byVal := ix.exact[tg.Key]; byVal != nil {
			try(byVal[tg.Value])
		}
		try(ix.wild[tg.Key])
	}
	return best
}

// bestSelector is the index of the best selector of x matching in (-1: none): more tags,
// then more exact values; the first written among equals.
func (x *expander) bestSelector(in *inbound) int {
	if x.sidx != nil {
		return x.sidx.best(x.sels, in)
	}
	best := -1
	for i := range x.sels {
		if s := &x.sels[i]; s.matches(in) && (best < 0 || betterSel(s, &x.sels[best])) {
			best = i
		}
	}
	return best
}

func betterSel(s, o *compiledSel) bool {
	return s.nTags > o.nTags || s.nTags == o.nTags && s.nExact > o.nExact
}

// dedupSelectors drops the selectors that repeat an earlier one: they could never be picked
// (the first among equals is), and a policy repeating one selector thousands of times would
// otherwise make each matching inbound try every copy.
func dedupSelectors(sels []mesh.Selector) []mesh.Selector {
	if len(sels) <= selIndexMin {
		return sels
	}
	seen := make(map[string]bool, len(sels))
	out := make([]mesh.Selector, 0, len(sels))
	for _, s := range sels {
		k := s.Match.String()
		if !seen[k] {
			seen[k] = true
			out = append(out, s)
		}
	}
	return out
}
