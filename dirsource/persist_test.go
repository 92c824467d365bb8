package dirsource

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// loadPersisted loads dir with a new loader and writes its decode cache to cache.
func loadPersisted(t testing.TB, dir, cache string) (*dirLoader, *mesh.Snapshot) {
	t.Helper()
	l := newDirLoader()
	snap, err := l.Load(exampleDataplane, dir)
	must(t, err)
	_, err = l.writeCache(cache)
	must(t, err)
	return l, snap
}

// fileADataplane returns a directory of n files holding a dataplane each (dp-0000.yaml
// holds svc0, and so on).
func fileADataplane(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	for i := range n {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("dp-%04d.yaml", i)),
			[]byte(strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i))), 0o644))
	}
	return dir
}

// inventory writes n dataplanes named prefix-0... to path.
func inventory(t testing.TB, path, prefix string, n int) {
	t.Helper()
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("%s%d", prefix, i)))
	}
	must(t, os.WriteFile(path, []byte(sb.String()), 0o644))
}

// entryStat is what tells an entry written again from one left alone.
type entryStat struct {
	ino   uint64
	mtime time.Time
	size  int64
}

// cacheEntries reads the headers of the files of every entry in dir, by entry name, with
// the entry's stat.
func cacheEntries(t *testing.T, dir string) (map[string][]cacheEntry, map[string]entryStat) {
	t.Helper()
	des, err := os.ReadDir(dir)
	must(t, err)
	heads, stats := map[string][]cacheEntry{}, map[string]entryStat{}
	for _, de := range des {
		if !isEntryName(de.Name()) {
			t.Errorf("%s in the cache directory", de.Name())
			continue
		}
		fi, err := de.Info()
		must(t, err)
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("entry %s is %v, want owner-only", de.Name(), fi.Mode())
		}
		stats[de.Name()] = entryStat{fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime(), fi.Size()}
		f, err := os.Open(filepath.Join(dir, de.Name()))
		must(t, err)
		dec := gob.NewDecoder(f)
		for {
			var h cacheEntry
			if err := dec.Decode(&h); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("entry %s: %v", de.Name(), err)
			}
			heads[de.Name()] = append(heads[de.Name()], h)
			for n := 0; n < h.Resources; {
				var chunk []mesh.Resource
				must(t, dec.Decode(&chunk))
				n += len(chunk)
			}
		}
		f.Close()
	}
	return heads, stats
}

// entryOf is the name of the entry holding the file at path ("" if none).
func entryOf(heads map[string][]cacheEntry, path string) string {
	_, name := headOf(heads, path)
	return name
}

// headOf is the header of the file at path, and the name of its entry ("" if none).
func headOf(heads map[string][]cacheEntry, path string) (cacheEntry, string) {
	for name, hs := range heads {
		for _, h := range hs {
			if h.Path == path {
				return h, name
			}
		}
	}
	return cacheEntry{}, ""
}

// filesIn counts the files the entries hold.
func filesIn(heads map[string][]cacheEntry) int {
	n := 0
	for _, hs := range heads {
		n += len(hs)
	}
	return n
}

// A restart reads decoded files back from the cache: nothing is decoded again and the model
// is the same (same content hash) as a cold load's.
func TestDecodeCacheSurvivesRestart(t *testing.T) {
	dir, _, cache := cacheMesh(t, invFile{"inventory.yaml", "svc", 2000})

	_, want := loadPersisted(t, dir, cache)
	heads, _ := cacheEntries(t, cache)
	files, err := resourceFiles(dir)
	must(t, err)
	if filesIn(heads) != len(files) || entryOf(heads, exampleDataplane) != "" {
		t.Fatalf("%d files in the entries for %d files (the dataplane file is never one)", filesIn(heads), len(files))
	}
	// The inventory (over bundleBelow) has an entry of its own, the small files share one.
	if len(heads) != 2 || len(heads[entryOf(heads, filepath.Join(dir, "inventory.yaml"))]) != 1 {
		t.Fatalf("entries: %v", heads)
	}

	warm := newDirLoader()
	n, err := warm.restore(cache)
	if err != nil || n != len(files) {
		t.Fatalf("restore: %d files, %v", n, err)
	}
	got, err := warm.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	if warm.decodes != 1 { // the dataplane file only: it is never persisted
		t.Errorf("a warm load decoded %d files, want 1", warm.decodes)
	}
	if got.Hash != want.Hash || len(got.Dataplanes) != len(want.Dataplanes) {
		t.Fatalf("warm model differs: hash %s want %s", got.Hash, want.Hash)
	}
	if w, err := warm.writeCache(cache); w.changed() || err != nil {
		t.Errorf("a restart with nothing changed wrote the cache: %+v, %v", w, err)
	}

	// A file changed while the agent was down is decoded again.
	future := time.Now().Add(time.Hour)
	must(t, os.WriteFile(filepath.Join(dir, "zz.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "new")), 0o644))
	must(t, os.Chtimes(filepath.Join(dir, "zz.yaml"), future, future))
	restartDecodes(t, cache, dir, 2, "after a change")
}

// restartDecodes restores a loader from cache, loads dir and fails unless it decoded want
// files (the dataplane file's is always one).
func restartDecodes(t *testing.T, cache, dir string, want int, what string) {
	t.Helper()
	l := newDirLoader()
	if _, err := l.restore(cache); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load(exampleDataplane, dir); err != nil || l.decodes != want {
		t.Fatalf("%s: %d files decoded (want %d), err %v", what, l.decodes, want, err)
	}
}

// The point of the entries: a change to one small file beside a large inventory writes the
// small files' entry and removes its old one; the inventory's entry is left as it is, not
// even rewritten in place.
func TestDecodeCacheWritesOnlyWhatChanged(t *testing.T) {
	dir, files, cache := cacheMesh(t, invFile{"inventory.yaml", "svc", 3000}, invFile{"small.yaml", "extra", 1})
	inv, small := files[0], files[1]
	l := newDirLoader()
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	first, err := l.writeCache(cache)
	must(t, err)
	heads, stats := cacheEntries(t, cache)
	if first.entries != len(heads) || len(heads) != 2 || first.resources < 3001 || first.removed != 0 {
		t.Fatalf("first write: %+v, %d entries there", first, len(heads))
	}
	smallFiles := len(heads[entryOf(heads, small)])

	inventory(t, small, "extra", 2) // one dataplane more
	_, err = l.Load(exampleDataplane, dir)
	must(t, err)
	w, err := l.writeCache(cache)
	must(t, err)
	if w.entries != 1 || w.resources >= 100 || w.removed != 1 || w.bytes <= 0 || w.bytes > first.bytes/10 {
		t.Fatalf("after a change to the small file: %+v (the first write: %d bytes)", w, first.bytes)
	}
	heads2, stats2 := cacheEntries(t, cache)
	if len(heads2) != len(heads) {
		t.Fatalf("%d entries, want %d", len(heads2), len(heads))
	}
	oldSmall, newSmall := entryOf(heads, small), entryOf(heads2, small)
	if h, _ := headOf(heads2, small); oldSmall == newSmall || h.Resources != 2 || len(heads2[newSmall]) != smallFiles {
		t.Fatalf("the small files' entry: %s then %s (%d resources of the changed file, %d files)", oldSmall, newSmall,
			h.Resources, len(heads2[newSmall]))
	}
	for name, st := range stats {
		if name == oldSmall {
			continue
		}
		if stats2[name] != st {
			t.Errorf("entry of %s touched: %+v, then %+v", heads[name][0].Path, st, stats2[name])
		}
	}
	if h, name := headOf(heads2, inv); name != entryOf(heads, inv) || h.Resources != 3000 {
		t.Errorf("the inventory's entry: %s, then %s", entryOf(heads, inv), name)
	}

	// A touch (a ConfigMap update gives every file a new inode) writes nothing: the next
	// start hashes the file instead of decoding it.
	future := time.Now().Add(time.Hour)
	must(t, os.Chtimes(inv, future, future))
	_, err = l.Load(exampleDataplane, dir)
	must(t, err)
	if w, err := l.writeCache(cache); w.changed() || err != nil {
		t.Fatalf("a touch wrote the cache: %+v, %v", w, err)
	}
	restartDecodes(t, cache, dir, 1, "a restart after a touch")
}

// A file gone from the directory loses its entry; one no longer decoding keeps the entry of
// its last good version (served in its place, at a restart too) until it is gone.
func TestDecodeCacheDropsRemovedFiles(t *testing.T) {
	dir, files, cache := cacheMesh(t, invFile{"gone.yaml", "gone", 3}, invFile{"bad.yaml", "bad", 3})
	gone, bad := files[0], files[1]
	l, _ := loadPersisted(t, dir, cache)
	heads, _ := cacheEntries(t, cache)
	if entryOf(heads, gone) == "" || entryOf(heads, bad) == "" {
		t.Fatal("no entries for the files")
	}

	must(t, os.Remove(gone))
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	w, err := l.writeCache(cache)
	must(t, err)
	heads2, _ := cacheEntries(t, cache)
	if w.removed != 1 || w.entries != 1 || entryOf(heads2, gone) != "" || filesIn(heads2) != filesIn(heads)-1 {
		t.Fatalf("after a file was removed: %+v, %d files in the entries (had %d)", w, filesIn(heads2), filesIn(heads))
	}

	must(t, os.WriteFile(bad, []byte("type: Dataplane\nname: [\n"), 0o644))
	var rf *RefusedFiles
	if _, err := l.Load(exampleDataplane, dir); !errors.As(err, &rf) {
		t.Fatalf("a broken file loaded: %v", err)
	}
	w, err = l.writeCache(cache)
	must(t, err)
	heads3, _ := cacheEntries(t, cache)
	if w.changed() || entryOf(heads3, bad) != entryOf(heads2, bad) || filesIn(heads3) != filesIn(heads2) {
		t.Fatalf("after a file stopped decoding: %+v", w)
	}
	must(t, os.Remove(bad))
	_, err = l.Load(exampleDataplane, dir)
	must(t, err)
	w, err = l.writeCache(cache)
	must(t, err)
	heads4, _ := cacheEntries(t, cache)
	if w.removed != 1 || w.entries != 1 || entryOf(heads4, bad) != "" || filesIn(heads4) != filesIn(heads2)-1 {
		t.Fatalf("after the broken file was removed: %+v", w)
	}
}

// Entries of another build are removed; a broken one is reported and removed, and only its
// files are decoded again (and written again); a write cut short is cleaned up.
func TestDecodeCacheIgnoredWhenStaleOrBroken(t *testing.T) {
	dir, files, cache := cacheMesh(t, invFile{"inventory.yaml", "svc", 2000}, invFile{"second.yaml", "sec", 1000})
	inv, second := files[0], files[1]
	if n, err := newDirLoader().restore(cache); n != 0 || err != nil {
		t.Errorf("missing cache: %d files, %v", n, err)
	}
	loadPersisted(t, dir, cache)
	heads, _ := cacheEntries(t, cache)

	// The inventory's entry cut short (a full disk), another's header garbled, a write
	// cut short left behind, and an entry of another build.
	cut := filepath.Join(cache, entryOf(heads, inv))
	b, err := os.ReadFile(cut)
	must(t, err)
	must(t, os.WriteFile(cut, b[:len(b)*2/3], 0o600))
	garbled := filepath.Join(cache, entryOf(heads, second))
	must(t, os.WriteFile(garbled, []byte("not gob"), 0o600))
	leftover := filepath.Join(cache, ".decode-cache-123")
	must(t, os.WriteFile(leftover, []byte("half"), 0o600))
	var sum digest
	staleName := entryName(filepath.Join(dir, "x.yaml"), "another kuma-dp", "", sum)
	must(t, cplink.WriteCacheFile(filepath.Join(cache, staleName), ".decode-cache-*",
		cacheEntry{Build: "another kuma-dp", Path: filepath.Join(dir, "x.yaml")}))

	l := newDirLoader()
	n, err := l.restore(cache)
	if err == nil || !strings.Contains(err.Error(), entryOf(heads, inv)) || !strings.Contains(err.Error(), filepath.Base(garbled)) {
		t.Errorf("broken entries not reported: %v", err)
	}
	if n != filesIn(heads)-2 {
		t.Errorf("restored %d files, want %d (all but the broken two)", n, filesIn(heads)-2)
	}
	for _, p := range []string{cut, garbled, leftover, filepath.Join(cache, staleName)} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", filepath.Base(p), err)
		}
	}
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	if l.decodes != 3 { // the dataplane file and the two inventories
		t.Errorf("%d files decoded, want 3", l.decodes)
	}
	w, err := l.writeCache(cache)
	if err != nil || w.entries != 2 || w.removed != 0 {
		t.Errorf("rewriting the broken entries: %+v, %v", w, err)
	}
}

// The source writes the cache when it starts watching and after changes.
func TestFilesPersistsTheCache(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	files, err := resourceFiles(dir)
	must(t, err)
	cache := filepath.Join(t.TempDir(), "model-cache")
	src, err := NewFiles(FilesConfig{DataplaneFile: exampleDataplane, PoliciesDir: dir, CacheDir: cache,
		Debounce: 10 * time.Millisecond}, nil)
	must(t, err)
	if u := src.Load(context.Background()); u.Err != nil {
		t.Fatal(u.Err)
	}
	fx := &fixture{t: t, src: src, out: make(chan cplink.Update, 4), done: make(chan error, 1)}
	ctx, cancel := contextWithCancel()
	fx.cancel = cancel
	go func() { fx.done <- src.Run(ctx, fx.out) }()
	t.Cleanup(fx.stop)
	waitEntries(t, cache, 1) // the example's files are all small: one entry
	if heads, _ := cacheEntries(t, cache); filesIn(heads) != len(files) {
		t.Fatalf("%d files in the entry, want %d", filesIn(heads), len(files))
	}
	restarted, err := NewFiles(FilesConfig{DataplaneFile: exampleDataplane, PoliciesDir: dir, CacheDir: cache}, nil)
	must(t, err)
	if u := restarted.Load(context.Background()); u.Err != nil || restarted.loader.decodes != 1 {
		t.Fatalf("restart: err %v, decodes %d", u.Err, restarted.loader.decodes)
	}
}

// waitEntries waits for dir to hold n cache entries.
func waitEntries(t *testing.T, dir string, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		des, _ := os.ReadDir(dir)
		if len(slices.DeleteFunc(des, func(de fs.DirEntry) bool { return !isEntryName(de.Name()) })) == n {
			return
		}
	}
	t.Fatalf("%s: %d entries not written", dir, n)
}

// The previous format's single file is never read, and removed at the first write.
func TestDecodeCacheRemovesTheOldFile(t *testing.T) {
	work := t.TempDir()
	cache := filepath.Join(work, "model-cache")
	old := filepath.Join(work, "model-cache.gob")
	must(t, os.WriteFile(old, []byte("the whole cache, as before"), 0o600))
	l := newDirLoader()
	if n, err := l.restore(cache); n != 0 || err != nil {
		t.Fatalf("restore beside the old file: %d, %v", n, err)
	}
	_, err := l.Load(exampleDataplane, examplePolicies)
	must(t, err)
	if wrote, err := l.persist(cache); !wrote || err != nil {
		t.Fatalf("persist: %v, %v", wrote, err)
	}
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("the old cache file is still there: %v", err)
	}
}

// An agent killed between writing a file's new entry and removing its old one, and after
// the reachable services changed (entries for two lists): the newest entries win, and the
// next write removes what is left.
func TestDecodeCacheAfterAWriteCutShort(t *testing.T) {
	dir, files, cache := cacheMesh(t, invFile{"small.yaml", "extra", 1})
	small := files[0]
	l, _ := loadPersisted(t, dir, cache)
	heads, _ := cacheEntries(t, cache)
	oldName := entryOf(heads, small)
	saved, err := os.ReadFile(filepath.Join(cache, oldName))
	must(t, err)

	inventory(t, small, "extra", 2)
	_, err = l.Load(exampleDataplane, dir)
	must(t, err)
	_, err = l.persist(cache)
	must(t, err)
	// The old entry back, older than the new one; and an entry for another list.
	past := time.Now().Add(-time.Hour)
	must(t, os.WriteFile(filepath.Join(cache, oldName), saved, 0o600))
	must(t, os.Chtimes(filepath.Join(cache, oldName), past, past))
	other := entryName(filepath.Join(dir, "other.yaml"), cplink.BuildID(), "another list", digest{1})
	must(t, cplink.WriteCacheFile(filepath.Join(cache, other), ".decode-cache-*",
		cacheEntry{Build: cplink.BuildID(), Reach: "another list", Path: filepath.Join(dir, "other.yaml"), Digest: digest{1}}))
	must(t, os.Chtimes(filepath.Join(cache, other), past, past))

	warm := newDirLoader()
	n, err := warm.restore(cache)
	if err != nil || n != filesIn(heads) {
		t.Fatalf("restore: %d files (want %d), %v", n, filesIn(heads), err)
	}
	if _, err := os.Stat(filepath.Join(cache, other)); !os.IsNotExist(err) {
		t.Errorf("the entry for another list was kept: %v", err)
	}
	s, err := warm.Load(exampleDataplane, dir)
	must(t, err)
	if warm.decodes != 1 || s.Hash != mustLoad(t, dir).Hash {
		t.Fatalf("after a write cut short: %d decodes, hash %s", warm.decodes, s.Hash)
	}
	if w, err := warm.writeCache(cache); err != nil || w.removed != 1 || w.entries != 0 {
		t.Fatalf("the next write: %+v, %v", w, err)
	}
	if _, err := os.Stat(filepath.Join(cache, oldName)); !os.IsNotExist(err) {
		t.Errorf("the old entry is still there: %v", err)
	}
}

func mustLoad(t *testing.T, dir string) *mesh.Snapshot {
	t.Helper()
	s, err := newDirLoader().Load(exampleDataplane, dir)
	must(t, err)
	return s
}

// resourceFiles lists the files a load of dir reads.
func resourceFiles(dir string) ([]string, error) {
	files, errs := mesh.ResourceFiles(dir)
	if len(errs) > 0 {
		return nil, errs
	}
	return files, nil
}

// Resources read back from the cache are settled as decoded ones are: replicas share one
// tag map, and the strings that repeat are one copy.
func TestDecodeCacheRestoresSettled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	must(t, os.MkdirAll(dir, 0o755))
	var sb strings.Builder
	for i := range 4 {
		doc := strings.ReplaceAll(extraDataplane, "NAME", "web")
		sb.WriteString(strings.Replace(doc, "name: web", fmt.Sprintf("name: rep-%d", i), 1) + "---\n")
	}
	must(t, os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(sb.String()), 0o644))
	cache := filepath.Join(t.TempDir(), "model-cache")
	loadPersisted(t, dir, cache)
	warm := newDirLoader()
	if n, err := warm.restore(cache); err != nil || n != 1 {
		t.Fatalf("restore: %d files, %v", n, err)
	}
	snap, err := warm.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	var maps []uintptr
	var meshes []*byte
	for _, dp := range snap.Dataplanes {
		if strings.HasPrefix(dp.Name, "rep-") {
			maps = append(maps, reflect.ValueOf(dp.Networking.Inbound[0].Tags).Pointer())
			meshes = append(meshes, unsafe.StringData(dp.Mesh))
		}
	}
	if len(maps) != 4 {
		t.Fatalf("%d restored replicas, want 4", len(maps))
	}
	for i := 1; i < 4; i++ {
		if maps[i] != maps[0] {
			t.Errorf("replica %d has a tag map of its own after a restore", i)
		}
		if meshes[i] != meshes[0] {
			t.Errorf("replica %d has a mesh name of its own after a restore", i)
		}
	}
}

// BenchmarkPersistOneChange measures the decode cache's write after one dataplane is added
// to a small file beside an inventory of 100,000 dataplanes: the loads between writes run
// inside the timed loop (a write is too quick to make b.N iterations of a load affordable),
// so the write's own cost is reported as persist-ms/op, persist-alloc-MB/op and
// written-MB/op (bytes of the cache files the write created or replaced). Run it
// with -benchtime=10x.
func BenchmarkPersistOneChange(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "policies")
	must(b, os.MkdirAll(dir, 0o755))
	var sb strings.Builder
	for i := range 100_000 {
		fmt.Fprintf(&sb, "type: Dataplane\nmesh: default\nname: dp-%d\nnetworking:\n  address: 10.%d.%d.%d\n"+
			"  inbound:\n    - port: 8080\n      tags:\n        kuma.io/service: svc-%d\n        kuma.io/zone: zone-1\n        version: v1\n---\n",
			i, i>>16&255, i>>8&255, i&255, i%5000)
	}
	must(b, os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(sb.String()), 0o644))
	small := filepath.Join(dir, "small.yaml")
	must(b, os.WriteFile(small, []byte(strings.ReplaceAll(extraDataplane, "NAME", "extra")), 0o644))
	cache := filepath.Join(b.TempDir(), "model-cache")
	l, _ := loadPersisted(b, dir, cache)
	b.Logf("inventory %.1f MB", float64(sb.Len())/1e6)
	var took time.Duration
	var alloc, wrote uint64
	var ms runtime.MemStats
	b.ResetTimer()
	for i := range b.N {
		var doc strings.Builder
		for k := range i + 2 {
			doc.WriteString(strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("extra-%d", k)) + "---\n")
		}
		must(b, os.WriteFile(small, []byte(doc.String()), 0o644))
		if _, err := l.Load(exampleDataplane, dir); err != nil {
			b.Fatal(err)
		}
		files := cacheFiles(b, cache)
		runtime.ReadMemStats(&ms)
		before, start := ms.TotalAlloc, time.Now()
		if wrote, err := l.persist(cache); !wrote || err != nil {
			b.Fatalf("persist: wrote %v, %v", wrote, err)
		}
		took += time.Since(start)
		runtime.ReadMemStats(&ms)
		alloc += ms.TotalAlloc - before
		wrote += written(files, cacheFiles(b, cache))
	}
	b.ReportMetric(float64(took.Microseconds())/1e3/float64(b.N), "persist-ms/op")
	b.ReportMetric(float64(alloc)/1e6/float64(b.N), "persist-alloc-MB/op")
	b.ReportMetric(float64(wrote)/1e6/float64(b.N), "written-MB/op")
}

// cacheFiles stats the files at or under path, by path.
func cacheFiles(b *testing.B, path string) map[string]entryStat {
	out := map[string]entryStat{}
	must(b, filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil {
			out[p] = entryStat{fi.Sys().(*syscall.Stat_t).Ino, fi.ModTime(), fi.Size()}
		}
		return err
	}))
	return out
}

// written is the size of the files in after that are not in before as they were then.
func written(before, after map[string]entryStat) uint64 {
	var n uint64
	for p, st := range after {
		if before[p] != st {
			n += uint64(st.size)
		}
	}
	return n
}

// invFile is an inventory file of a cacheMesh: its name, its dataplanes' name prefix and count.
type invFile struct {
	name, prefix string
	n            int
}

// cacheMesh copies the example policies to a directory and adds the inventory files invs;
// it returns the directory, the files' paths and a decode cache path beside it.
func cacheMesh(t *testing.T, invs ...invFile) (dir string, files []string, cache string) {
	t.Helper()
	dir = t.TempDir()
	copyDir(t, examplePolicies, dir)
	for _, f := range invs {
		p := filepath.Join(dir, f.name)
		inventory(t, p, f.prefix, f.n)
		files = append(files, p)
	}
	return dir, files, filepath.Join(t.TempDir(), "model-cache")
}

// A directory of a file per dataplane: the small files share one entry (not one each,
// with gob's type descriptions written and read again for every file), read back whole at
// a restart; a change to one of them writes that entry again; an entry whose files do not
// match its name is refused, and its files decoded.
func TestDecodeCacheBundlesSmallFiles(t *testing.T) {
	const n = 300
	dir := fileADataplane(t, n)
	cache := filepath.Join(t.TempDir(), "model-cache")
	l := newDirLoader()
	want, err := l.Load(exampleDataplane, dir)
	must(t, err)
	w, err := l.writeCache(cache)
	must(t, err)
	heads, _ := cacheEntries(t, cache)
	if w.entries != 1 || w.resources != n || len(heads) != 1 || filesIn(heads) != n {
		t.Fatalf("first write: %+v, %d entries holding %d files", w, len(heads), filesIn(heads))
	}
	for _, hs := range heads {
		if !slices.IsSortedFunc(hs, func(a, b cacheEntry) int { return strings.Compare(a.Path, b.Path) }) {
			t.Errorf("the files of the entry are not in path order")
		}
	}
	warm := newDirLoader()
	if got, err := warm.restore(cache); got != n || err != nil {
		t.Fatalf("restore: %d files, %v", got, err)
	}
	s, err := warm.Load(exampleDataplane, dir)
	must(t, err)
	if warm.decodes != 1 || s.Hash != want.Hash {
		t.Fatalf("a restart decoded %d files, hash %s (want 1, %s)", warm.decodes, s.Hash, want.Hash)
	}

	must(t, os.WriteFile(filepath.Join(dir, "dp-0007.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "edited")), 0o644))
	_, err = warm.Load(exampleDataplane, dir)
	must(t, err)
	w, err = warm.writeCache(cache)
	must(t, err)
	heads2, _ := cacheEntries(t, cache)
	if h, _ := headOf(heads2, filepath.Join(dir, "dp-0007.yaml")); w.entries != 1 || w.removed != 1 || len(heads2) != 1 || h.Resources != 1 {
		t.Fatalf("after an edit: %+v, %d entries", w, len(heads2))
	}

	// The entry under another name (as if its files had other contents) is refused whole.
	var name string
	for name = range heads2 {
	}
	var sum digest
	renamed := entryName(bundleKey, cplink.BuildID(), "", sum)
	must(t, os.Rename(filepath.Join(cache, name), filepath.Join(cache, renamed)))
	broken := newDirLoader()
	if got, err := broken.restore(cache); got != 0 || err == nil || !strings.Contains(err.Error(), "do not match its name") {
		t.Fatalf("a renamed entry: %d files restored, %v", got, err)
	}
	_, err = broken.Load(exampleDataplane, dir)
	must(t, err)
	if broken.decodes != n+1 {
		t.Fatalf("after a refused entry %d files decoded, want %d", broken.decodes, n+1)
	}
}

// A reload that changed no file's content (a touch of every file, as a ConfigMap update or a
// fresh checkout gives) leaves nothing new to keep: the cache keeps the path strings it
// had, and the write that follows finds nothing to do without listing the files again.
func TestTouchedFilesKeepNothingNew(t *testing.T) {
	dir := fileADataplane(t, 200)
	cache := filepath.Join(t.TempDir(), "model-cache")
	l, first := loadPersisted(t, dir, cache)
	keys := map[*byte]bool{}
	for p := range l.cache.all() {
		keys[unsafe.StringData(p)] = true
	}

	later := time.Now().Add(time.Hour)
	des, err := os.ReadDir(dir)
	must(t, err)
	for _, de := range des {
		must(t, os.Chtimes(filepath.Join(dir, de.Name()), later, later))
	}
	again, err := l.Load(exampleDataplane, dir)
	must(t, err)
	if again != first || l.decodes != 201 {
		t.Fatalf("a touch: same snapshot %v, %d files decoded in all (want 201)", again == first, l.decodes)
	}
	for p := range l.cache.all() {
		if !keys[unsafe.StringData(p)] {
			t.Fatalf("the cache holds a new string for %s", p)
		}
	}
	if allocs := testing.AllocsPerRun(5, func() {
		if w, err := l.writeCache(cache); w.changed() || err != nil {
			t.Fatalf("a touch wrote the cache: %+v, %v", w, err)
		}
	}); allocs != 0 {
		t.Errorf("a write with nothing to write allocated %v times", allocs)
	}
}

// Files read back from the cache hold about what the same files hold decoded: the small
// files of one entry share string blocks, as a file's resources do when decoded.
func TestDecodeCacheRestoresAsSmall(t *testing.T) {
	const n = 1000
	dir := fileADataplane(t, n)
	cache := filepath.Join(t.TempDir(), "model-cache")
	held := func(load func(*dirLoader)) (perFile int64) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := newDirLoader()
		load(l)
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(l)
		return (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	}
	cold := held(func(l *dirLoader) {
		_, err := l.Load(exampleDataplane, dir)
		must(t, err)
		_, err = l.writeCache(cache)
		must(t, err)
	})
	warm := held(func(l *dirLoader) {
		if got, err := l.restore(cache); got != n || err != nil {
			t.Fatalf("restore: %d files, %v", got, err)
		}
		_, err := l.Load(exampleDataplane, dir)
		must(t, err)
	})
	// Decoded, a file holds 820-1,190 bytes here (the interned paths' share varies with
	// the GC); read back with a string block per file it held ~1,490.
	if warm > 1250 {
		t.Errorf("read back from the cache a file holds %d bytes, decoded %d", warm, cold)
	}
	t.Logf("bytes a file: decoded %d, read back %d", cold, warm)
}

// A write of the cache that fails (a full disk) keeps the entries it would have replaced,
// so a restart still reads back the files that did not change; the next write that
// succeeds removes them.
func TestDecodeCacheFailedWriteKeepsTheOld(t *testing.T) {
	dir, files, cache := cacheMesh(t, invFile{"inventory.yaml", "svc", 2000})
	l, _ := loadPersisted(t, dir, cache)
	before, _ := cacheEntries(t, cache)

	inventory(t, files[0], "svc", 2001) // the inventory changes: its entry is to be replaced
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	l.writeEntry = func(string, string, func(*gob.Encoder) error) error { return syscall.ENOSPC }
	if w, err := l.writeCache(cache); err == nil || w.removed != 0 {
		t.Fatalf("a failing write: %+v, %v", w, err)
	}
	if after, _ := cacheEntries(t, cache); len(after) != len(before) {
		t.Fatalf("%d entries after a failed write, want the %d there before", len(after), len(before))
	}
	restartDecodes(t, cache, dir, 2, "after a failed write") // the dataplane file and the changed inventory

	l.writeEntry = cplink.WriteCacheStream
	if w, err := l.writeCache(cache); err != nil || w.entries != 1 || w.removed != 1 {
		t.Fatalf("the next write: %+v, %v", w, err)
	}
}

// A file refused is served at its last good version by an agent restarted meanwhile too:
// the decode cache keeps that version's entry while the file stays refused (written, or
// left from before the file broke), and a restart serves it, as the agent before it did,
// instead of leaving the file out of the model.
func TestDecodeCacheKeepsTheLastGoodOfARefusedFile(t *testing.T) {
	for _, persistBroken := range []bool{true, false} {
		t.Run(fmt.Sprint("written while refused: ", persistBroken), func(t *testing.T) {
			dir, _, cache := cacheMesh(t)
			l, _ := loadPersisted(t, dir, cache)
			redis := filepath.Join(dir, "redis.yaml")
			good, _ := os.ReadFile(redis)
			future := time.Now().Add(time.Hour)
			must(t, os.WriteFile(redis, bytes.Replace(good, []byte("address: 10.0.3.1"), []byte("adress: 10.0.3.1"), 1), 0o644))
			must(t, os.Chtimes(redis, future, future))
			if persistBroken {
				s, err := l.Load(exampleDataplane, dir)
				var rf *RefusedFiles
				if s == nil || !errors.As(err, &rf) || !rf.Files[0].Kept {
					t.Fatalf("before the restart: %v", err)
				}
				_, err = l.writeCache(cache)
				must(t, err)
			}
			for restart := range 2 {
				warm := newDirLoader()
				if _, err := warm.restore(cache); err != nil {
					t.Fatal(err)
				}
				s, err := warm.Load(exampleDataplane, dir)
				var rf *RefusedFiles
				if s == nil || !errors.As(err, &rf) || len(rf.Files) != 1 || rf.Files[0].Path != redis || !rf.Files[0].Kept {
					t.Fatalf("restart %d: want redis.yaml refused and kept, got %v", restart, err)
				}
				at := slices.IndexFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "redis-1" })
				if at < 0 || s.Dataplanes[at].Networking.Address != "10.0.3.1" {
					t.Fatalf("restart %d: redis-1 not served at its last good version", restart)
				}
				_, err = warm.writeCache(cache) // a second restart finds it still
				must(t, err)
			}
			// Fixed, the file is served as it is now, and its old entry goes.
			must(t, os.WriteFile(redis, bytes.Replace(good, []byte("10.0.3.1"), []byte("10.0.3.7"), 1), 0o644))
			must(t, os.Chtimes(redis, future.Add(time.Hour), future.Add(time.Hour)))
			warm := newDirLoader()
			if _, err := warm.restore(cache); err != nil {
				t.Fatal(err)
			}
			s, err := warm.Load(exampleDataplane, dir)
			must(t, err)
			if at := slices.IndexFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "redis-1" }); at < 0 || s.Dataplanes[at].Networking.Address != "10.0.3.7" {
				t.Fatal("the fixed file is not served")
			}
		})
	}
}

// A file broken and then a forced reload (SIGHUP, as after an edit): the last good
// version's entry stays in the decode cache all the same, and a restart serves it.
func TestDecodeCacheKeepsTheLastGoodAcrossAForcedReload(t *testing.T) {
	dir, _, cache := cacheMesh(t)
	l, _ := loadPersisted(t, dir, cache)
	redis := filepath.Join(dir, "redis.yaml")
	good, _ := os.ReadFile(redis)
	must(t, os.WriteFile(redis, bytes.Replace(good, []byte("address: 10.0.3.1"), []byte("adress: 10.0.3.1"), 1), 0o644))
	future := time.Now().Add(time.Hour)
	must(t, os.Chtimes(redis, future, future))
	l.forget()
	var rf *RefusedFiles
	if s, err := l.Load(exampleDataplane, dir); s == nil || !errors.As(err, &rf) || !rf.Files[0].Kept {
		t.Fatalf("the forced reload: %v", err)
	}
	_, err := l.writeCache(cache)
	must(t, err)
	warm := newDirLoader()
	if _, err := warm.restore(cache); err != nil {
		t.Fatal(err)
	}
	s, err := warm.Load(exampleDataplane, dir)
	if s == nil || !errors.As(err, &rf) || !rf.Files[0].Kept ||
		!slices.ContainsFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "redis-1" }) {
		t.Fatalf("after the restart: want redis.yaml's last good version served, got %v", err)
	}
}

// A file refused because it cannot be read has no entry in the decode cache any more (a
// read error is never cached): its last good version's entry is written all the same.
func TestDecodeCacheKeepsTheLastGoodOfAnUnreadableFile(t *testing.T) {
	dir, _, cache := cacheMesh(t)
	l, _ := loadPersisted(t, dir, cache)
	redis := filepath.Join(dir, "redis.yaml")
	heads, _ := cacheEntries(t, cache)
	was, _ := headOf(heads, redis)
	if was.Path == "" {
		t.Fatal("redis.yaml has no entry after the first write")
	}
	good, _ := os.ReadFile(redis)
	must(t, os.WriteFile(redis, bytes.Replace(good, []byte("10.0.3.1"), []byte("10.0.3.7"), 1), 0o644))
	future := time.Now().Add(time.Hour)
	must(t, os.Chtimes(redis, future, future))
	l.readFile = func(p string) ([]byte, error) {
		if p == redis {
			return nil, &os.PathError{Op: "open", Path: p, Err: os.ErrPermission}
		}
		return os.ReadFile(p)
	}
	var rf *RefusedFiles
	if s, err := l.Load(exampleDataplane, dir); s == nil || !errors.As(err, &rf) || len(rf.Files) != 1 || !rf.Files[0].Kept {
		t.Fatalf("want redis.yaml refused and kept: %v", err)
	}
	if _, ok := l.cache.get(redis); ok {
		t.Fatal("the unreadable file still has an entry in the cache: this test covers one that has none")
	}
	_, err := l.writeCache(cache)
	must(t, err)
	heads, _ = cacheEntries(t, cache)
	if h, _ := headOf(heads, redis); h.Digest != was.Digest {
		t.Errorf("redis.yaml's last good version not in the decode cache (header %+v)", h)
	}
}

// A policies directory holding router shards' resources (Router, Route: the files of
// testdata/routes) is cached and read back as any other: their kinds were not registered,
// and every write of the cache failed while such a file was in the directory.
func TestDecodeCacheKeepsRouterResources(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	routes, err := os.ReadFile("../testdata/routes/shard-a.yaml")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "shard-a.yaml"), routes, 0o644))
	cache := t.TempDir()
	_, want := loadPersisted(t, dir, cache)
	if len(want.Routers) == 0 || len(want.Routes) == 0 {
		t.Fatalf("the model holds %d routers, %d routes", len(want.Routers), len(want.Routes))
	}
	warm := newDirLoader()
	if _, err := warm.restore(cache); err != nil {
		t.Fatal(err)
	}
	got, err := warm.Load(exampleDataplane, dir)
	must(t, err)
	if warm.decodes != 1 || got.Hash != want.Hash {
		t.Fatalf("restart: %d files decoded (want the dataplane file's only), hash %s want %s", warm.decodes, got.Hash, want.Hash)
	}
}

// A large entry of the decode cache (over freeAfterResources resources) is written at
// cacheWriteGCPercent, so that the encoding's garbage is collected as it goes; a small one
// at the process's GOGC; and the process's GOGC is back once the write is done.
func TestDecodeCacheLargeEntryWrittenAtLowGC(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set in the environment: the write leaves it as set")
	}
	const processGC = 80
	defer debug.SetGCPercent(debug.SetGCPercent(processGC))
	dir, files, cache := cacheMesh(t, invFile{"inventory.yaml", "svc", 2 * freeAfterResources})
	l := newDirLoader()
	_, err := l.Load(exampleDataplane, dir)
	must(t, err)
	at := map[string]int{} // by the entry's first file, GOGC while it was written
	l.writeEntry = func(path, pattern string, encode func(*gob.Encoder) error) error {
		gc := debug.SetGCPercent(processGC)
		debug.SetGCPercent(gc)
		return cplink.WriteCacheStream(path, pattern, func(enc *gob.Encoder) error {
			at[path] = gc
			return encode(enc)
		})
	}
	want, _, _ := l.cacheEntries(cplink.BuildID()) // (before the write: after it, nothing to write)
	if len(want) != 2 {
		t.Fatalf("%d entries to write, want 2 (the inventory's, the bundle)", len(want))
	}
	if w, err := l.writeCache(cache); err != nil || w.entries != 2 {
		t.Fatalf("the write: %+v, %v; want 2 entries", w, err)
	}
	for name, fs := range want {
		gc, ok := at[filepath.Join(cache, name)]
		wantGC := processGC
		if fs[0].head.Path == files[0] {
			wantGC = cacheWriteGCPercent
		}
		if !ok || gc != wantGC {
			t.Errorf("the entry of %s (%d files) written at GOGC %d (written: %v), want %d", fs[0].head.Path, len(fs), gc, ok, wantGC)
		}
	}
	if gc := debug.SetGCPercent(processGC); gc != processGC {
		t.Fatalf("GOGC %d after the write, want the process's %d back", gc, processGC)
	}
}
