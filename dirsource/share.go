package dirsource

import (
	"slices"
	"strings"
	"unsafe"

	"github.com/kumadp/kuma-dp/mesh"
)

// share makes the list of each file of Dataplanes alone that snap holds in a row (its own
// dataplane possibly inserted among them) the stretch of snap.Dataplanes that holds them:
// the loader then keeps no list of its own beside the snapshot's (an inventory of 100,000
// dataplanes: 0.8 MB), and the snapshot's list lives as long as the loader's would have.
// Every list the loader keeps (parts, which become lastFrom; the file cache's entries; the
// last good versions) is moved with it, so a list that was a stretch of was's (the last
// snapshot) either is one of snap's now or is copied into a list of its own: the loader
// never holds a snapshot's list but the last one's. A file whose dataplanes are not in a
// row in snap (files of interleaved names, a dataplane of another mesh, the copy of the
// agent's own that its dataplane file replaces) keeps its own list.
func (l *dirLoader) share(snap, was *mesh.Snapshot, parts []loadPart) {
	moved := map[resList]resList{}
	move := func(list resList) resList {
		if !list.dataplanes() || list.form == formDataplane {
			return list // no list of dataplanes of its own (one dataplane: its pointer alone)
		}
		if to, ok := moved[list]; ok {
			return to
		}
		to, ok := sharedList(list, snap, was)
		if ok {
			moved[list] = to
		}
		return to
	}
	for i := range parts {
		parts[i].list = move(parts[i].list)
	}
	for p, g := range l.good {
		if to := move(g.list); to != g.list {
			g.list = to
			l.good[p] = g
		}
	}
	for i := range l.cache.files {
		s := &l.cache.files[i]
		s.list = move(s.list)
	}
}

// sharedList is what list, of dataplanes in an array, becomes once snap is built (see
// share), and whether it changed.
func sharedList(list resList, snap, was *mesh.Snapshot) (resList, bool) {
	if to, ok := stretchOf(list, snap); ok {
		return to, to != list
	}
	if inside(list, was) {
		a, b := list.halves()
		return ownDataplanes(append(append(make([]*mesh.Dataplane, 0, list.n), a...), b...)), true
	}
	return list, false
}

// stretchOf is list (of dataplanes, in an array) as a stretch of snap.Dataplanes, when snap
// holds its dataplanes in a row, the snapshot's own dataplane possibly among them.
func stretchOf(list resList, snap *mesh.Snapshot) (resList, bool) {
	dps := snap.Dataplanes
	first := *(**mesh.Dataplane)(list.first)
	k, found := slices.BinarySearchFunc(dps, first.Name, func(d *mesh.Dataplane, name string) int {
		return strings.Compare(d.Name, name)
	})
	if !found || dps[k] != first {
		return list, false
	}
	// the list's dataplanes from dps[k] on, snap.Self possibly between two of them
	a, b := list.halves()
	j, skip := k, 0
	for _, half := range [2][]*mesh.Dataplane{a, b} {
		for _, dp := range half {
			if j > k && skip == 0 && j < len(dps) && dps[j] == snap.Self {
				skip = j - k
				j++
			}
			if j >= len(dps) || dps[j] != dp {
				return list, false
			}
			j++
		}
	}
	form := int32(formDataplanes)
	if skip > 0 {
		form = int32(skip)
	}
	return resList{first: unsafe.Pointer(&dps[k]), n: list.n, form: form}, true
}

// inside reports whether list is a stretch of s's list of dataplanes (false for a nil s).
func inside(list resList, s *mesh.Snapshot) bool {
	if s == nil || len(s.Dataplanes) == 0 || !list.dataplanes() || list.form == formDataplane {
		return false
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(s.Dataplanes)))
	at := uintptr(list.first)
	return at >= lo && at < lo+uintptr(len(s.Dataplanes))*unsafe.Sizeof(s.Dataplanes[0])
}
