package dirsource

import (
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/kumadp/kuma-dp/mesh"
)

type resourceKey struct{ kind, mesh, name string }

func keyOf(r mesh.Resource) resourceKey {
	m := r.GetMeta()
	return resourceKey{r.Kind(), m.Mesh, m.Name}
}

// mergeByName returns the resources of runs (each in name order, as decoded files keep
// them; n in all) in name order, those of one name in the order of their runs - the
// order a snapshot sorts them to, and "first given" for its duplicates - so that building
// it finds them sorted as it reads them. The largest run is copied in stretches between
// the others' resources, each placed by a binary search of it: a one-file change beside a
// large inventory reads a few of the inventory's names, not all of them. With many small
// runs the runs are concatenated and the snapshot sorts them.
func mergeByName(runs [][]mesh.Resource, n int) []mesh.Resource {
	big := -1
	for i, r := range runs {
		if big < 0 || len(r) > len(runs[big]) {
			big = i
		}
	}
	out := make([]mesh.Resource, 0, n)
	if big < 0 || n-len(runs[big]) > len(runs[big])/8 {
		for _, r := range runs {
			out = append(out, r...)
		}
		return out
	}
	type other struct {
		r   mesh.Resource
		run int
	}
	var others []other
	for i, r := range runs {
		if i != big {
			for _, x := range r {
				others = append(others, other{x, i})
			}
		}
	}
	slices.SortStableFunc(others, func(a, b other) int {
		if c := strings.Compare(a.r.GetMeta().Name, b.r.GetMeta().Name); c != 0 {
			return c
		}
		return a.run - b.run
	})
	main := runs[big]
	from := 0
	for _, o := range others {
		name := o.r.GetMeta().Name
		// Before main's resources of the same name when its run comes first, after them
		// otherwise.
		at := from + sort.Search(len(main)-from, func(k int) bool {
			mn := main[from+k].GetMeta().Name
			return mn > name || (mn == name && o.run < big)
		})
		out = append(append(out, main[from:at]...), o.r)
		from = at
	}
	return append(out, main[from:]...)
}

// keepReachable drops from a decoded piece the dataplanes reach does not keep (a nil res[x]
// stands for kept[x].old), so that an inventory is not held whole while it decodes for an
// agent that keeps a few of its services.
func keepReachable(reach *mesh.Reach, res []mesh.Resource, k []kept) ([]mesh.Resource, []kept) {
	if reach == nil {
		return res, k
	}
	n := 0
	for x, r := range res {
		if r == nil {
			r = k[x].old
		}
		if dp, ok := r.(*mesh.Dataplane); ok && !reach.Keeps(dp) {
			continue
		}
		res[n] = res[x]
		if k != nil {
			k[n] = k[x]
		}
		n++
	}
	clear(res[n:])
	if k != nil {
		clear(k[n:])
		k = k[:n]
	}
	return res[:n], k
}

// kept is a resource decoded before that a fresh one equals but for its source.
type kept struct {
	old    mesh.Resource
	source mesh.Source // the fresh one's source, numbered within its piece
}

// indexResources indexes a file's resources by kind, mesh and name.
func indexResources(rs []mesh.Resource) map[resourceKey]mesh.Resource {
	m := make(map[resourceKey]mesh.Resource, len(rs))
	for _, r := range rs {
		m[keyOf(r)] = r
	}
	return m
}

// keptPiece finds, for each resource of a piece just decoded, the one of the previous
// decode (prev, by key) it equals but for its source; those are set to nil in res and
// returned in kept (nil when there is none), so a large file edited in one place never
// holds a second copy of everything else while the rest of it decodes.
func keptPiece(prev map[resourceKey]mesh.Resource, res []mesh.Resource) []kept {
	if len(prev) == 0 {
		return nil
	}
	var out []kept
	for i, r := range res {
		old, ok := prev[keyOf(r)]
		if !ok {
			continue
		}
		m := r.GetMeta()
		src := m.Source
		m.Source = old.GetMeta().Source
		same := reflect.DeepEqual(old, r)
		m.Source = src
		if !same {
			continue
		}
		if out == nil {
			out = make([]kept, len(res))
		}
		out[i] = kept{old: old, source: src}
		res[i] = nil
	}
	return out
}

// withSource returns a shallow copy of r with another source (one reflect copy per
// resource, whatever its kind).
func withSource(r mesh.Resource, source mesh.Source) mesh.Resource {
	p := reflect.New(reflect.TypeOf(r).Elem())
	p.Elem().Set(reflect.ValueOf(r).Elem())
	c := p.Interface().(mesh.Resource)
	c.GetMeta().Source = source
	return c
}

// renumber turns document n of a piece of a file into document n+offset of the file (a
// source with no document stays as it is).
func renumber(source mesh.Source, offset int) mesh.Source {
	if source.Doc() == 0 {
		return source
	}
	return source.WithDoc(source.Doc() + offset)
}
