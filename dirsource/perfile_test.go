package dirsource

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

// The resources of the directory's files name their file with the file cache's string for
// it, not with the name mesh.NewSource interns (kept by the interning table while any
// source holds it, ~200 bytes beside its text): decoded, decoded again after an edit, or
// restored from the decode cache after a restart. A source made now interns the name
// afresh; no resource's source is that one.
func TestSourcesNameTheirFileWithTheCachesString(t *testing.T) {
	dir := fileADataplane(t, 20)
	check := func(when string, l *dirLoader, snap *mesh.Snapshot) {
		t.Helper()
		for _, dp := range snap.Dataplanes {
			if dp == snap.Self {
				continue
			}
			src := dp.Source
			path := src.File()
			if c, ok := l.cache.kept(path); !ok || c.err != nil {
				t.Fatalf("%s: %s (%s) has no cache entry", when, dp.Name, src)
			}
			i := l.cache.index()[path]
			if !src.SameFile(mesh.NewSource(path, 0)) && src.SameFile(mesh.NewSource(path, 0).In(l.cache.files[i].name)) {
				continue
			}
			t.Fatalf("%s: %s names its file %s with another string than the cache's", when, dp.Name, src)
		}
		l.cache.dropIndex()
	}
	l := newDirLoader()
	snap, err := l.Load(exampleDataplane, dir)
	must(t, err)
	check("decoded", l, snap)
	first := filepath.Join(dir, "dp-0000.yaml")
	must(t, os.WriteFile(first, []byte(strings.ReplaceAll(extraDataplane, "NAME", "svc0")+"# edited\n"), 0o644))
	snap, err = l.Load(exampleDataplane, dir)
	must(t, err)
	check("an edit", l, snap)

	cache := filepath.Join(t.TempDir(), "cache")
	_, err = l.writeCache(cache)
	must(t, err)
	warm := newDirLoader()
	n, err := warm.restore(cache)
	if err != nil || n == 0 {
		t.Fatalf("restored %d files: %v", n, err)
	}
	decodes := warm.decodes
	snap, err = warm.Load(exampleDataplane, dir)
	must(t, err)
	if warm.decodes != decodes+1 { // the dataplane file alone (never cached)
		t.Fatalf("%d files decoded after the restore", warm.decodes-decodes)
	}
	check("restored", warm, snap)
}

// A file that gives back the resources it gave (a touch) has them named already: owning
// their sources again interns nothing (100,000 files touched made as many entries of the
// interning table, freed collections later: +16 MiB); a file decoded has them named as
// each piece is decoded, so the load's last pass interns nothing either.
func TestOwningOwnedSourcesInternsNothing(t *testing.T) {
	dir := fileADataplane(t, 5)
	l := newDirLoader()
	interned := 0
	l.intern = func(file string, doc int) mesh.Source {
		interned++
		return mesh.NewSource(file, doc)
	}
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	later := time.Now().Add(time.Hour)
	for _, f := range l.cache.files {
		must(t, os.Chtimes(*f.name, later, later))
	}
	decodes := l.decodes
	_, err = l.Load(exampleDataplane, dir)
	must(t, err)
	if l.decodes != decodes {
		t.Fatalf("a touch of every file decoded %d", l.decodes-decodes)
	}
	must(t, os.WriteFile(filepath.Join(dir, "dp-0001.yaml"), []byte(strings.Replace(strings.ReplaceAll(extraDataplane, "NAME", "svc1"), "10.9.9.9", "10.9.9.8", 1)), 0o644))
	_, err = l.Load(exampleDataplane, dir)
	must(t, err)
	if interned != 0 {
		t.Fatalf("a load, a touch and an edit interned %d names", interned)
	}
}

// A file decoded in one piece is never decoded again in one piece (its errors are that
// piece's): its text is not held until every file of the load is decoded, as a file of
// several pieces' is, nor its piece's result (the worker finishes it).
func TestOnePieceFileTextNotHeld(t *testing.T) {
	dir := t.TempDir()
	one, many := filepath.Join(dir, "one.yaml"), filepath.Join(dir, "many.yaml")
	must(t, os.WriteFile(one, []byte(strings.ReplaceAll(extraDataplane, "NAME", "a")), 0o644))
	inventory(t, many, "b", 2000) // ~300 KB: pieces of 64 KB or more
	l := newDirLoader()
	paths := []string{one, many}
	out := make([]cachedFile, len(paths))
	for i, p := range paths {
		st, err := stampOf(p)
		must(t, err)
		out[i].stamp = st
	}
	d := &parallelDecode{l: l, paths: paths, names: make([]*string, len(paths)), out: out, cores: 2,
		data: map[int][]byte{}, results: map[int][]pieceResult{}, before: map[int]map[resourceKey]mesh.Resource{},
		next: make(chan pieceJob, 64)}
	d.send(0)
	d.send(1)
	if n := len(d.results[1]); n < 2 {
		t.Fatalf("the file of 2,000 dataplanes went in %d piece", n)
	}
	if _, held := d.data[0]; held || len(d.results[0]) != 0 || !slices.Equal(d.whole, []int{0}) {
		t.Fatalf("a file of one piece: its text held %v, %d piece results held, finished by the workers %v",
			held, len(d.results[0]), d.whole)
	}
	if _, held := d.data[1]; !held {
		t.Fatal("the text of a file of several pieces is not held")
	}
}

// What the decode cache's write lists of a directory of many small files is made at its
// size: the bundle's list is not grown by copies (100,000 files: up to twice its 11 MB at
// the peak), and the files' paths are listed without reading their lists back.
func TestCacheWriteListsAtSize(t *testing.T) {
	dir := fileADataplane(t, 40)
	l := newDirLoader()
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	l.mu.Lock()
	allocs := testing.AllocsPerRun(5, func() { l.cachedPaths() })
	l.mu.Unlock()
	if allocs > 1 {
		t.Errorf("listing 41 files' paths allocated %.0f times", allocs)
	}
	want, _, ok := l.cacheEntries("a build")
	if !ok || len(want) != 1 {
		t.Fatalf("%d entries to write, want the bundle alone", len(want))
	}
	for _, bundle := range want {
		if len(bundle) != 40 || cap(bundle) > 41 {
			t.Fatalf("the bundle lists %d files in room for %d", len(bundle), cap(bundle))
		}
	}
}
