package dirsource

import (
	"context"
	"encoding/gob"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/kumadp/kuma-dp/cplink"
)

// A restart reads decoded files back from the cache: nothing is decoded again and the model
// is the same (same content hash) as a cold load's.
func TestDecodeCacheSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	var sb strings.Builder
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	must(t, os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(sb.String()), 0o644))
	cache := filepath.Join(t.TempDir(), "model-cache.gob")

	cold := newDirLoader()
	want, err := cold.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cold.persist(cache); err != nil {
		t.Fatal(err)
	}

	warm := newDirLoader()
	n, err := warm.restore(cache)
	if err != nil || n == 0 {
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

	// A file changed while the agent was down is decoded again.
	future := time.Now().Add(time.Hour)
	must(t, os.WriteFile(filepath.Join(dir, "zz.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "new")), 0o644))
	must(t, os.Chtimes(filepath.Join(dir, "zz.yaml"), future, future))
	again := newDirLoader()
	if _, err := again.restore(cache); err != nil {
		t.Fatal(err)
	}
	if _, err := again.Load(exampleDataplane, dir); err != nil || again.decodes != 2 {
		t.Fatalf("after a change: decodes %d, err %v", again.decodes, err)
	}
}

func TestDecodeCacheIgnoredWhenStaleOrBroken(t *testing.T) {
	dir := t.TempDir()
	stale := filepath.Join(dir, "stale.gob")
	f, err := os.Create(stale)
	must(t, err)
	must(t, gob.NewEncoder(f).Encode(cacheHeader{Build: "another kuma-dp", Count: 1}))
	f.Close()
	l := newDirLoader()
	if n, err := l.restore(stale); n != 0 || err != nil {
		t.Errorf("stale cache: %d files, %v", n, err)
	}
	leftover := filepath.Join(dir, ".decode-cache-123")
	must(t, os.WriteFile(leftover, []byte("half"), 0o600))
	broken := filepath.Join(dir, "broken.gob")
	must(t, os.WriteFile(broken, []byte("not gob"), 0o600))
	if n, err := l.restore(broken); n != 0 || err == nil {
		t.Errorf("broken cache: %d files, %v", n, err)
	}
	if n, err := l.restore(filepath.Join(dir, "missing.gob")); n != 0 || err != nil {
		t.Errorf("missing cache: %d files, %v", n, err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("a write cut short was left behind: %v", err)
	}
	// Loading still works from the files.
	if _, err := l.Load(exampleDataplane, examplePolicies); err != nil {
		t.Fatal(err)
	}
}

// The source writes the cache when it starts watching and after changes.
func TestFilesPersistsTheCache(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	cache := filepath.Join(t.TempDir(), "model-cache.gob")
	src, err := NewFiles(FilesConfig{DataplaneFile: exampleDataplane, PoliciesDir: dir, CacheFile: cache,
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
	waitFile(t, cache)
	restarted, err := NewFiles(FilesConfig{DataplaneFile: exampleDataplane, PoliciesDir: dir, CacheFile: cache}, nil)
	must(t, err)
	if u := restarted.Load(context.Background()); u.Err != nil || restarted.loader.decodes != 1 {
		t.Fatalf("restart: err %v, decodes %d", u.Err, restarted.loader.decodes)
	}
}

func waitFile(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s not written", path)
}

// The cache is a stream of pieces: one cut short (a full disk) restores nothing.
func TestDecodeCacheCutShort(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	var sb strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	must(t, os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(sb.String()), 0o644))
	cache := filepath.Join(t.TempDir(), "model-cache.gob")
	l := newDirLoader()
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	if wrote, err := l.persist(cache); !wrote || err != nil {
		t.Fatalf("persist: wrote %v, %v", wrote, err)
	}
	if wrote, err := l.persist(cache); wrote || err != nil {
		t.Fatalf("a second persist with nothing decoded: wrote %v, %v", wrote, err)
	}
	b, err := os.ReadFile(cache)
	must(t, err)
	must(t, os.WriteFile(cache, b[:len(b)*2/3], 0o600))
	cut := newDirLoader()
	if n, err := cut.restore(cache); n != 0 || err == nil || len(cut.cache) != 0 {
		t.Fatalf("a cache cut short: %d files, %d cached, err %v", n, len(cut.cache), err)
	}
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
	cache := filepath.Join(t.TempDir(), "model-cache.gob")
	cold := newDirLoader()
	if _, err := cold.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := cold.persist(cache); err != nil {
		t.Fatal(err)
	}
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
// written-MB/op (bytes of the cache files the write left newer than it started). Run it
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
	l := newDirLoader()
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		b.Fatal(err)
	}
	if _, err := l.persist(cache); err != nil {
		b.Fatal(err)
	}
	b.Logf("inventory %.1f MB", float64(sb.Len())/1e6)
	var took time.Duration
	var alloc, written uint64
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
		runtime.ReadMemStats(&ms)
		before, start := ms.TotalAlloc, time.Now()
		if wrote, err := l.persist(cache); !wrote || err != nil {
			b.Fatalf("persist: wrote %v, %v", wrote, err)
		}
		took += time.Since(start)
		runtime.ReadMemStats(&ms)
		alloc += ms.TotalAlloc - before
		written += newerThan(b, cache, start)
	}
	b.ReportMetric(float64(took.Microseconds())/1e3/float64(b.N), "persist-ms/op")
	b.ReportMetric(float64(alloc)/1e6/float64(b.N), "persist-alloc-MB/op")
	b.ReportMetric(float64(written)/1e6/float64(b.N), "written-MB/op")
}

// newerThan is the size of the files at or under path modified since t.
func newerThan(b *testing.B, path string, t time.Time) uint64 {
	var n uint64
	must(b, filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err == nil && !fi.ModTime().Before(t) {
			n += uint64(fi.Size())
		}
		return err
	}))
	return n
}
