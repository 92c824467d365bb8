package dirsource

import (
	"unsafe"

	"github.com/kumadp/kuma-dp/mesh"
)

// resList is a file's resources as the loader keeps them from one load to the next (the
// file cache's entry, the parts the last snapshot was built from: the same list). A file
// of Dataplanes alone - an inventory of 100,000 of them - is kept as pointers to them,
// 8 bytes each, where a list of resources (interfaces) takes 16, and once the snapshot
// holds them in a row as a stretch of the snapshot's own list of dataplanes (see share):
// one list of them, not two. A file of one Dataplane keeps the pointer alone. A load reads
// a list back as a list of resources made then (all), garbage once the load is done.
// Other files keep their list of resources as decoded.
//
// It is held as its first element and length (a directory of a file per dataplane holds
// 10,000 entries or more: a slice's capacity, which nothing reads, would be 8 bytes more
// each), and its form; a nil list stays nil (no first element). Lists compare with ==:
// equal lists hold the same resources.
type resList struct {
	first unsafe.Pointer // what form says; nil: a nil list
	n     int32
	form  int32 // formResources, formDataplanes, formDataplane, or k > 0 (see skipsAt)
}

// The forms of a resList; a form k > 0 is a stretch of n+1 dataplanes of a snapshot's list
// whose element k is not the file's (the snapshot's own dataplane, inserted in name order
// among the file's).
const (
	formResources  = 0  // first is the first of n mesh.Resource
	formDataplanes = -1 // first is the first of n *mesh.Dataplane
	formDataplane  = -2 // n is 1: first is the *mesh.Dataplane itself
)

// listOf is rs as the loader keeps it: its Dataplanes' pointers when it holds nothing else.
func listOf(rs []mesh.Resource) resList {
	if len(rs) == 0 {
		return resList{first: unsafe.Pointer(unsafe.SliceData(rs))}
	}
	for _, r := range rs {
		if _, ok := r.(*mesh.Dataplane); !ok {
			return resList{first: unsafe.Pointer(unsafe.SliceData(rs)), n: int32(len(rs))}
		}
	}
	if len(rs) == 1 {
		return resList{first: unsafe.Pointer(rs[0].(*mesh.Dataplane)), n: 1, form: formDataplane}
	}
	dps := make([]*mesh.Dataplane, len(rs))
	for i, r := range rs {
		dps[i] = r.(*mesh.Dataplane)
	}
	return ownDataplanes(dps)
}

func ownDataplanes(dps []*mesh.Dataplane) resList {
	return resList{first: unsafe.Pointer(unsafe.SliceData(dps)), n: int32(len(dps)), form: formDataplanes}
}

// dataplanes reports whether the list holds Dataplanes alone (and at least one).
func (l resList) dataplanes() bool { return l.first != nil && l.form != formResources && l.n > 0 }

// skipsAt is the element of the stretch that is not the list's (0: none, the stretch is the
// list's n elements).
func (l resList) skipsAt() int { return max(int(l.form), 0) }

// stretch is the dataplanes the list's first points to: n of them, or n+1 with the one at
// skipsAt not the list's. Only for a list of dataplanes in an array (not formDataplane).
func (l resList) stretch() []*mesh.Dataplane {
	n := int(l.n)
	if l.skipsAt() > 0 {
		n++
	}
	return unsafe.Slice((**mesh.Dataplane)(l.first), n)
}

// halves is the list's dataplanes, those of the first slice then those of the second (empty
// unless the stretch has an element not the list's); a list of dataplanes in an array only
// (not formDataplane).
func (l resList) halves() (a, b []*mesh.Dataplane) {
	st := l.stretch()
	if skip := l.skipsAt(); skip > 0 {
		return st[:skip], st[skip+1:]
	}
	return st, nil
}

// all is the list's resources (nil when it is nil): a list made now for Dataplanes kept
// as pointers, else the list kept, of capacity its length.
func (l resList) all() []mesh.Resource {
	if !l.dataplanes() {
		return unsafe.Slice((*mesh.Resource)(l.first), l.n)
	}
	if l.form == formDataplane {
		return []mesh.Resource{(*mesh.Dataplane)(l.first)}
	}
	rs := make([]mesh.Resource, 0, l.n)
	a, b := l.halves()
	for _, dp := range a {
		rs = append(rs, dp)
	}
	for _, dp := range b {
		rs = append(rs, dp)
	}
	return rs
}

// holds reports whether rs is l's resources, in order (nil and empty apart): a load's list
// read back from the cache (all) and not changed since, whose list is then kept again
// instead of a copy of it.
func (l resList) holds(rs []mesh.Resource) bool {
	if (rs == nil) != (l.first == nil) || len(rs) != int(l.n) {
		return false
	}
	if !l.dataplanes() {
		return len(rs) == 0 || unsafe.Pointer(unsafe.SliceData(rs)) == l.first
	}
	if l.form == formDataplane {
		return rs[0] == mesh.Resource((*mesh.Dataplane)(l.first))
	}
	a, b := l.halves()
	for i, dp := range a {
		if rs[i] != mesh.Resource(dp) {
			return false
		}
	}
	for i, dp := range b {
		if rs[len(a)+i] != mesh.Resource(dp) {
			return false
		}
	}
	return true
}

// keep is the list the loader keeps for rs: was when it holds rs, else listOf(rs).
func keep(was resList, rs []mesh.Resource) resList {
	if was.holds(rs) {
		return was
	}
	return listOf(rs)
}
