package dirsource

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// The in-memory decode cache answers as a map by path would, across entries set again,
// dropped from the middle and the end, and its index dropped and built again; and it holds
// no map between loads.
func TestFileCacheIsAMapByPath(t *testing.T) {
	var c fileCache
	want := map[string]cachedFile{}
	set := func(p string, size int64, err error) {
		f := cachedFile{stamp: fileStamp{size: size}, sum: [32]byte{byte(size)}, err: err}
		c.set(p, f)
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

// A load's part gives back its resources as they were given, nil or empty alike, and two
// parts are the same only for the same resources (the same first object), not equal ones.
func TestLoadPartKeepsItsResources(t *testing.T) {
	if got := newLoadPart("a", nil).res(); got != nil {
		t.Fatalf("nil resources came back as %#v", got)
	}
	if got := newLoadPart("a", []mesh.Resource{}).res(); got == nil || len(got) != 0 {
		t.Fatalf("no resources came back as %#v", got)
	}
	res := []mesh.Resource{&mesh.Dataplane{}, &mesh.Dataplane{}, nil}[:2]
	got := newLoadPart("a", res).res()
	if len(got) != 2 || cap(got) != 2 || &got[0] != &res[0] || got[1] != res[1] {
		t.Fatalf("resources came back as %v (capacity %d)", got, cap(got))
	}
	copied := slices.Clone(res)
	for _, c := range []struct {
		a, b []loadPart
		same bool
	}{
		{[]loadPart{newLoadPart("a", res)}, []loadPart{newLoadPart("a", res[:2:2])}, true},
		{[]loadPart{newLoadPart("a", res)}, []loadPart{newLoadPart("a", copied)}, false},
		{[]loadPart{newLoadPart("a", res)}, []loadPart{newLoadPart("a", res[:1])}, false},
		{[]loadPart{newLoadPart("a", res)}, []loadPart{newLoadPart("b", res)}, false},
		{[]loadPart{newLoadPart("a", nil)}, []loadPart{newLoadPart("a", []mesh.Resource{})}, true},
	} {
		if got := sameParts(c.a, c.b); got != c.same {
			t.Errorf("sameParts(%v, %v) = %v", c.a, c.b, got)
		}
	}
}
