package dirsource

import (
	"context"
	"encoding/gob"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	must(t, cold.persist(cache))

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
	must(t, gob.NewEncoder(f).Encode(persisted{Build: "another kuma-dp", Files: []persistedFile{{Path: exampleDataplane}}}))
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
