package dirsource

import (
	"unsafe"

	"github.com/kumadp/kuma-dp/mesh"
)

// resList is a file's resources as the loader keeps them from one load to the next (the
// file cache's entry, the parts the last snapshot was built from: the same list). A file
// of Dataplanes alone - an inventory of 100,000 of them - is kept as pointers to them,
// 8 bytes each, where a list of resources (interfaces) takes 16; a load reads it back as
// a list of resources made then (all), garbage once the load is done. Other files keep
// their list of resources as decoded.
//
// It is held as its first element and length (a directory of a file per dataplane holds
// 10,000 entries or more: a slice's capacity, which nothing reads, would be 8 bytes more
// each); a nil list stays nil (no first element). Lists compare with ==: equal lists hold
// the same resources.
type resList struct {
	first unsafe.Pointer // the first *mesh.Dataplane (dps) or mesh.Resource; nil: a nil list
	n     int32
	dps   bool
}

// listOf is rs as the loader keeps it: its Dataplanes' pointers when it holds nothing else.
func listOf(rs []mesh.Resource) resList {
	if len(rs) > 0 {
		dps := make([]*mesh.Dataplane, len(rs))
		for i, r := range rs {
			dp, ok := r.(*mesh.Dataplane)
			if !ok {
				return resList{first: unsafe.Pointer(unsafe.SliceData(rs)), n: int32(len(rs))}
			}
			dps[i] = dp
		}
		return resList{first: unsafe.Pointer(unsafe.SliceData(dps)), n: int32(len(rs)), dps: true}
	}
	return resList{first: unsafe.Pointer(unsafe.SliceData(rs)), n: int32(len(rs))}
}

// all is the list's resources (nil when it is nil): a list made now for Dataplanes kept
// as pointers, else the list kept, of capacity its length.
func (l resList) all() []mesh.Resource {
	if !l.dps {
		return unsafe.Slice((*mesh.Resource)(l.first), l.n)
	}
	dps := unsafe.Slice((**mesh.Dataplane)(l.first), l.n)
	rs := make([]mesh.Resource, len(dps))
	for i, dp := range dps {
		rs[i] = dp
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
	if !l.dps {
		return len(rs) == 0 || unsafe.Pointer(unsafe.SliceData(rs)) == l.first
	}
	for i, dp := range unsafe.Slice((**mesh.Dataplane)(l.first), l.n) {
		if rs[i] != mesh.Resource(dp) {
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
