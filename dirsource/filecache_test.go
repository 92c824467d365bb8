package dirsource

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"github.com/kumadp/kuma-dp/mesh"
)

// The in-memory decode cache answers as a map by path would, across entries set again,
// dropped from the middle and the end, and its index dropped and built again; and it holds
// no map between loads.
func TestFileCacheIsAMapByPath(t *testing.T) {
	var c fileCache
	want := map[string]cachedFile{}
	set := func(p string, size int64, err error) {
		f := cachedFile{stamp: fileStamp{size: size}, sum: digest{byte(size)}, err: err}
		c.set(p, f, nil)
		want[p] = f
	}
	del := func(p string) {
		c.del(p)
		delete(want, p)
	}
	check := func(when string) {
		t.Helper()
		same := func(a, b cachedFile) bool {
			return a.stamp == b.stamp && a.sum == b.sum && a.err == b.err && len(a.res) == len(b.res)
		}
		if got := maps.Collect(c.all()); !maps.EqualFunc(got, want, same) || c.len() != len(want) {
			t.Fatalf("%s: %d entries %v, want %v", when, c.len(), got, want)
		}
		for p, w := range want {
			if got, ok := c.get(p); !ok || !same(got, w) {
				t.Fatalf("%s: get(%s) = %v, %v; want %v", when, p, got, ok, w)
			}
		}
		if _, ok := c.get("none"); ok {
			t.Fatalf("%s: an entry for a file never set", when)
		}
	}
	c.growFor([]string{"f0", "f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "f9"}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	if cap(c.files) < 10 {
		t.Fatalf("room for %d entries, want 10", cap(c.files))
	}
	for i := range 10 {
		set(fmt.Sprintf("f%d", i), int64(i+1), nil)
	}
	check("set")
	refused := errors.New("refused")
	set("f3", 33, refused)
	set("f4", 44, refused)
	set("f4", 45, nil)
	set("f8", 88, refused)
	del("f0")
	del("f8")
	del("f9")
	del("f5")
	del("absent")
	check("set again and dropped")
	c.dropIndex()
	if c.at != nil {
		t.Fatal("the index outlives dropIndex")
	}
	check("index built again")
	del("f3")
	set("f0", 100, refused)
	check("dropped and set again")
	for p := range want {
		del(p)
	}
	c.dropIndex()
	check("all dropped")
	if cap(c.files) > 16 || c.errs != nil {
		t.Fatalf("%d entries' room and %d errors kept for none", cap(c.files), len(c.errs))
	}
}

// A load leaves no index by path beside the cache's entries.
func TestLoadDropsTheCacheIndex(t *testing.T) {
	dir := fileADataplane(t, 20)
	l := newDirLoader()
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	if l.cache.at != nil || l.cache.len() != 21 {
		t.Fatalf("after a load: index %v, %d entries (want none, 21)", l.cache.at != nil, l.cache.len())
	}
	room := cap(l.cache.files)
	later := time.Now().Add(time.Hour)
	des, err := os.ReadDir(dir)
	must(t, err)
	for _, de := range des {
		must(t, os.Chtimes(filepath.Join(dir, de.Name()), later, later))
	}
	decodes := l.decodes
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	if l.decodes != decodes || l.cache.len() != 21 || cap(l.cache.files) != room {
		t.Fatalf("a touch of every file: %d decoded, %d entries, room for %d (want 0, 21, %d)",
			l.decodes-decodes, l.cache.len(), cap(l.cache.files), room)
	}
}

// A load's part gives back its resources as they were given, nil or empty alike; a file of
// Dataplanes alone is kept as pointers to them (8 bytes each, not an interface's 16) and
// read back as a new list of the same objects, a list of other resources as it was given.
// Two parts are the same only for the same list kept (read back from the cache and kept
// again), not for equal resources.
func TestLoadPartKeepsItsResources(t *testing.T) {
	if got := newLoadPart("a", cachedFile{}).res(); got != nil {
		t.Fatalf("nil resources came back as %#v", got)
	}
	if got := newLoadPart("a", cachedFile{res: []mesh.Resource{}}).res(); got == nil || len(got) != 0 {
		t.Fatalf("no resources came back as %#v", got)
	}
	dps := []mesh.Resource{&mesh.Dataplane{}, &mesh.Dataplane{}, nil}[:2]
	part := newLoadPart("a", cachedFile{res: dps})
	if part.list.form != formDataplanes {
		t.Fatal("a file of Dataplanes alone kept as a list of resources")
	}
	if got := part.res(); len(got) != 2 || got[0] != dps[0] || got[1] != dps[1] {
		t.Fatalf("Dataplanes came back as %v", got)
	}
	mixed := []mesh.Resource{&mesh.Dataplane{}, &mesh.TrafficRoute{}, nil}[:2]
	got := newLoadPart("a", cachedFile{res: mixed}).res()
	if len(got) != 2 || cap(got) != 2 || &got[0] != &mixed[0] || got[1] != mixed[1] {
		t.Fatalf("resources came back as %v (capacity %d)", got, cap(got))
	}
	// what the cache gives back (its list, and the resources read from it) is kept as the
	// same list, unless the load changed the resources
	again := newLoadPart("a", cachedFile{res: part.res(), list: part.list})
	reordered := newLoadPart("a", cachedFile{res: []mesh.Resource{dps[1], dps[0]}, list: part.list})
	for _, c := range []struct {
		a, b []loadPart
		same bool
	}{
		{[]loadPart{part}, []loadPart{again}, true},
		{[]loadPart{part}, []loadPart{newLoadPart("a", cachedFile{res: dps})}, false},
		{[]loadPart{part}, []loadPart{reordered}, false},
		{[]loadPart{part}, []loadPart{newLoadPart("a", cachedFile{res: dps[:1], list: part.list})}, false},
		{[]loadPart{part}, []loadPart{newLoadPart("b", cachedFile{res: part.res(), list: part.list})}, false},
		{[]loadPart{newLoadPart("a", cachedFile{res: mixed})}, []loadPart{newLoadPart("a", cachedFile{res: mixed[:2:2]})}, true},
		{[]loadPart{newLoadPart("a", cachedFile{})}, []loadPart{newLoadPart("a", cachedFile{res: []mesh.Resource{}})}, true},
	} {
		if got := sameParts(c.a, c.b); got != c.same {
			t.Errorf("sameParts(%v, %v) = %v", c.a, c.b, got)
		}
	}
}

// res is the part's resources (nil when they were nil), of capacity their length.
func (p loadPart) res() []mesh.Resource { return p.list.all() }

// A directory of a file per dataplane keeps, for each file, an entry of the file cache and
// a part of the last snapshot: their sizes are a cost of every file (the path's name, the
// stamp, the content's digest, the list: 64 bytes; the path and list again: 32).
func TestPerFileEntriesStaySmall(t *testing.T) {
	if n := unsafe.Sizeof(fileSlot{}); n > 64 {
		t.Errorf("a file cache entry takes %d bytes, over 64", n)
	}
	if n := unsafe.Sizeof(loadPart{}); n > 32 {
		t.Errorf("a load's part takes %d bytes, over 32", n)
	}
	if n := unsafe.Sizeof(resList{}); n > 16 {
		t.Errorf("a list takes %d bytes, over 16", n)
	}
}
