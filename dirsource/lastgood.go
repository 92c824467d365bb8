package dirsource

import (
	"cmp"
	"slices"
	"strings"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// lastGood replaces the result of each file refused in this load (results[i], of
// paths[i]) by the resources that file gave the last snapshot - none when it gave none or
// is new - and reports them all; nil when every file was accepted. A resource of a last
// good version that an accepted file now defines (the same in self's snapshot) gives way
// to it: moved out of the refused file, it is served from where it is now, instead of
// the two copies refusing the whole load. It does not come back to the last good
// version (the version kept from then on is the one served).
func (l *dirLoader) lastGood(self *mesh.Dataplane, paths []string, results []cachedFile, wasFor string) error {
	var byPath map[string]resList
	var refused []cplink.RefusedFile
	var keptAt []int
	keptFor := l.keptFor
	l.keptFor = nil
	now := l.reachKey // reach.Key(), set with reach above (a load without self returns before)
	for i := range results {
		if results[i].err == nil {
			continue
		}
		if byPath == nil {
			byPath = make(map[string]resList, len(l.lastFrom))
			for _, p := range l.lastFrom {
				byPath[p.path] = p.list
			}
		}
		list, kept := byPath[paths[i]]
		good := list.all()
		from := l.lastFromFor
		if !kept {
			from = wasFor
			g := l.good[paths[i]] // not in the last snapshot (a restart)
			good, list, kept = g.list.all(), g.list, true
		}
		kept = kept && good != nil
		if kept && l.reach != nil {
			good = l.reach.Filter(good) // kept for another list of reachable services
		}
		holds, tracked := keptFor[paths[i]]
		if !tracked {
			holds = from // refused since this load
		}
		if l.keptFor == nil {
			l.keptFor = map[string]string{}
		}
		l.keptFor[paths[i]] = reachMeet(holds, now)
		refused = append(refused, cplink.RefusedFile{Path: paths[i], Kept: kept, Narrowed: kept && !reachCovers(holds, now),
			Err: results[i].err})
		results[i] = cachedFile{res: good, list: list, err: results[i].err} // list: kept again when it holds good
		if len(good) > 0 {
			keptAt = append(keptAt, i)
		}
	}
	if refused == nil {
		return nil
	}
	giveWay(self, results, keptAt)
	for i := range results {
		if results[i].err != nil {
			results[i].err = nil
		}
	}
	return &RefusedFiles{Files: refused}
}

// reachCovers reports whether a version kept for the reachable services of key have
// holds every dataplane the list of key want keeps (keys as mesh.Reach.Key: "" is every
// service).
func reachCovers(have, want string) bool {
	if have == "" {
		return true
	}
	if want == "" {
		return false
	}
	h := strings.Split(have, "\n")
	for _, s := range strings.Split(want, "\n") {
		if _, ok := slices.BinarySearch(h, s); !ok {
			return false
		}
	}
	return true
}

// reachMeet is the key of the services both keys keep.
func reachMeet(a, b string) string {
	switch {
	case a == "":
		return b
	case b == "":
		return a
	}
	bs := strings.Split(b, "\n")
	var out []string
	for _, s := range strings.Split(a, "\n") {
		if _, ok := slices.BinarySearch(bs, s); ok {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return "\x00" // none: covers no list
	}
	return strings.Join(out, "\n")
}

// nameKey is what two resources must not share in a snapshot: their kind and name.
type nameKey struct{ kind, name string }

// giveWay drops from the last good versions at keptAt (results[i] for i in keptAt) each
// resource that a file accepted in this load (a result without err) defines too: of the
// same kind and name, both in self's mesh (or of every mesh) - the two a snapshot holds
// and finds duplicated. The dataplane file's own dataplane wins over a copy in any file.
func giveWay(self *mesh.Dataplane, results []cachedFile, keptAt []int) {
	if len(keptAt) == 0 || self == nil {
		return
	}
	meshName := cmp.Or(self.Mesh, "default")
	in := func(r mesh.Resource) bool { return mesh.Meshless(r) || mesh.ResourceMesh(r.GetMeta()) == meshName }
	keys := map[nameKey]bool{}
	for _, i := range keptAt {
		for _, r := range results[i].res {
			if in(r) {
				keys[nameKey{r.Kind(), r.GetMeta().Name}] = false
			}
		}
	}
	taken := 0
	for _, r := range results {
		if r.err != nil {
			continue
		}
		for _, res := range r.res {
			k := nameKey{res.Kind(), res.GetMeta().Name}
			if seen, ok := keys[k]; ok && !seen && in(res) {
				keys[k] = true
				taken++
			}
		}
	}
	if taken == 0 {
		return
	}
	drop := func(r mesh.Resource) bool { return keys[nameKey{r.Kind(), r.GetMeta().Name}] && in(r) }
	for _, i := range keptAt {
		if res := results[i].res; slices.ContainsFunc(res, drop) {
			// a new slice: the last good version, held by the last snapshot, is not modified
			results[i].res = slices.DeleteFunc(slices.Clone(res), drop)
		}
	}
}

// keepGood keeps the cache's entry for path, a file refused in this load, as its last
// good version (l.good) when it holds one and none is kept yet.
func (l *dirLoader) keepGood(path string) {
	if path == l.dpFile {
		return
	}
	if _, ok := l.good[path]; ok {
		return
	}
	// its list alone (res nil): read back when served; res kept would be a second list of the file
	if c, ok := l.cache.kept(path); ok && c.err == nil && !c.readFailed {
		if c.sum == (digest{}) {
			c.sum = l.forgot[path] // forgotten by a forced reload: its content's hash then
		}
		l.good[path] = c
	}
}

// forgetAllBut drops the cached files that are not in paths (gone since the last load).
func (l *dirLoader) forgetAllBut(paths []string) {
	seen := make(map[string]bool, len(paths))
	for _, p := range paths {
		seen[p] = true
	}
	for p := range l.good {
		if !seen[p] {
			delete(l.good, p)
			l.changes++
		}
	}
	for i := l.cache.len() - 1; i >= 0; i-- { // from the end: a dropped entry takes the last one's place
		if p := *l.cache.files[i].name; !seen[p] {
			l.cache.del(p)
			l.changes++
		}
	}
}
