package dirsource

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The dataplane file is a template filled from --dataplane-var; a missing value is a refusal
// naming the file; the rendered file is never persisted (a new pod IP at the next start).
func TestFilesDataplaneVars(t *testing.T) {
	dir := t.TempDir()
	dp := filepath.Join(dir, "dp.yaml")
	must(t, os.WriteFile(dp, []byte(strings.Replace(strings.ReplaceAll(extraDataplane, "NAME", "{{ name }}"), "10.9.9.9", "{{ address }}", 1)), 0o644))
	// a policies directory beside it, so the cache has an entry to look into
	pol := filepath.Join(dir, "policies")
	must(t, os.Mkdir(pol, 0o755))
	must(t, os.WriteFile(filepath.Join(pol, "other.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "other")), 0o644))
	cache := filepath.Join(dir, "model-cache")
	src, err := NewFiles(FilesConfig{DataplaneFile: dp, PoliciesDir: pol, CacheDir: cache, DataplaneVars: map[string]string{"name": "web-7", "address": "10.1.2.3"}}, nil)
	must(t, err)
	u := src.Load(context.Background())
	if u.Err != nil || u.Snapshot.Self.Name != "web-7" || u.Snapshot.Self.Networking.Address != "10.1.2.3" {
		t.Fatalf("rendered: %+v %v", u.Snapshot, u.Err)
	}
	src.persist()
	entries, err := os.ReadDir(cache)
	must(t, err)
	var cached strings.Builder
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(cache, e.Name()))
		must(t, err)
		cached.Write(b)
	}
	if !strings.Contains(cached.String(), "10.9.9.9") {
		t.Fatalf("the cache (%d entries) does not hold the policies directory's dataplane", len(entries))
	}
	if strings.Contains(cached.String(), "10.1.2.3") {
		t.Error("the rendered dataplane file was persisted")
	}
	bad, err := NewFiles(FilesConfig{DataplaneFile: dp, DataplaneVars: map[string]string{"name": "web-7"}}, nil)
	must(t, err)
	if u := bad.Load(context.Background()); u.Err == nil || !strings.Contains(u.Err.Error(), dp) || !strings.Contains(u.Err.Error(), "{{ address }}") {
		t.Fatalf("missing var: %v", u.Err)
	}
}
