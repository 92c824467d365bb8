package dirsource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

const (
	exampleDataplane = "../testdata/mesh/dataplane.yaml"
	examplePolicies  = "../testdata/mesh/policies"
)

// The loader gives the same model as mesh.Load on the bundled example.
func TestDirLoaderMatchesMeshLoad(t *testing.T) {
	want, err := mesh.Load(exampleDataplane, examplePolicies)
	if err != nil {
		t.Fatal(err)
	}
	got, err := newDirLoader().Load(exampleDataplane, examplePolicies)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash != want.Hash || len(got.Dataplanes) != len(want.Dataplanes) || len(got.VirtualOutbounds) != len(want.VirtualOutbounds) {
		t.Fatalf("hash %s, want %s", got.Hash, want.Hash)
	}
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	must(t, os.MkdirAll(dst, 0o755))
	for _, e := range entries {
		if e.IsDir() {
			copyDir(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()))
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644))
	}
}

// A ConfigMap volume: files in ..<timestamp>/, a ..data symlink to it, and one symlink per
// key. Every resource is loaded once.
func TestDirLoaderConfigMapVolume(t *testing.T) {
	want, err := mesh.Load(exampleDataplane, examplePolicies)
	if err != nil {
		t.Fatal(err)
	}
	vol := t.TempDir()
	copyDir(t, examplePolicies, filepath.Join(vol, "..2026_11_23_00_00_00.000000001"))
	must(t, os.Symlink("..2026_11_23_00_00_00.000000001", filepath.Join(vol, "..data")))
	entries, _ := os.ReadDir(examplePolicies)
	for _, e := range entries {
		must(t, os.Symlink(filepath.Join("..data", e.Name()), filepath.Join(vol, e.Name())))
	}
	got, err := newDirLoader().Load(exampleDataplane, vol)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hash != want.Hash {
		t.Fatalf("hash %s, want %s", got.Hash, want.Hash)
	}
}

func TestDirLoaderDecodesOnlyChangedFiles(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	files, _ := mesh.ResourceFiles(dir)
	l := newDirLoader()
	first, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	if l.decodes != len(files)+1 {
		t.Fatalf("first load decoded %d files, want %d", l.decodes, len(files)+1)
	}
	again, err := l.Load(exampleDataplane, dir)
	if err != nil || again.Hash != first.Hash || l.decodes != len(files)+1 {
		t.Fatalf("unchanged reload: err %v, decodes %d", err, l.decodes)
	}
	// One new file: one decode; its resource is in the model.
	must(t, os.WriteFile(filepath.Join(dir, "zz-extra.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "extra")), 0o644))
	third, err := l.Load(exampleDataplane, dir)
	if err != nil || l.decodes != len(files)+2 || len(third.Dataplanes) != len(first.Dataplanes)+1 {
		t.Fatalf("after adding a file: err %v, decodes %d, dataplanes %d", err, l.decodes, len(third.Dataplanes))
	}
	// A rewrite (new mtime) is decoded again; a removal is forgotten.
	future := time.Now().Add(time.Hour)
	must(t, os.WriteFile(filepath.Join(dir, "zz-extra.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "renamed")), 0o644))
	must(t, os.Chtimes(filepath.Join(dir, "zz-extra.yaml"), future, future))
	fourth, err := l.Load(exampleDataplane, dir)
	if err != nil || l.decodes != len(files)+3 || fourth.Hash == third.Hash {
		t.Fatalf("after a rewrite: err %v, decodes %d", err, l.decodes)
	}
	must(t, os.Remove(filepath.Join(dir, "zz-extra.yaml")))
	fifth, err := l.Load(exampleDataplane, dir)
	if err != nil || fifth.Hash != first.Hash {
		t.Fatalf("after removing the file: err %v, hash %s want %s", err, fifth.Hash, first.Hash)
	}
	l.forget()
	if _, err := l.Load(exampleDataplane, dir); err != nil || l.decodes != 2*len(files)+4 {
		t.Fatalf("after forget: err %v, decodes %d", err, l.decodes)
	}
}

const extraDataplane = `type: Dataplane
mesh: default
name: NAME
networking:
  address: 10.9.9.9
  inbound:
    - port: 80
      tags:
        kuma.io/service: NAME
`

func TestDirLoaderErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	bad := filepath.Join(dir, "bad.yaml")
	must(t, os.WriteFile(bad, []byte("type: VirtualOutbound\nmesh: default\nname: bad\nselectors:\n  - match:\n      kuma.io/service: web\nconf:\n  hosts: x.mesh\n  port: 80\n"), 0o644))
	twoDP := filepath.Join(t.TempDir(), "dp.yaml")
	b, _ := os.ReadFile(exampleDataplane)
	must(t, os.WriteFile(twoDP, []byte(string(b)+"\n---\n"+strings.ReplaceAll(extraDataplane, "NAME", "other")), 0o644))
	tests := []struct {
		name, dp, want string
	}{
		{"policy", exampleDataplane, bad + "#1"},
		{"dataplane file with two resources", twoDP, "exactly one Dataplane"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newDirLoader().Load(tt.dp, dir)
			var errs mesh.Errors
			if !errors.As(err, &errs) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want mesh.Errors containing %q, got %v", tt.want, err)
			}
		})
	}
}

func BenchmarkDirLoaderReloadOneFile(b *testing.B) {
	dir := b.TempDir()
	var sb strings.Builder
	for i := 0; i < 10000; i++ {
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	must(b, os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(sb.String()), 0o644))
	l := newDirLoader()
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		must(b, os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("p%d", i))), 0o644))
		if _, err := l.Load(exampleDataplane, dir); err != nil {
			b.Fatal(err)
		}
	}
}

// A large file is decoded in pieces on every core; the result is exactly mesh.LoadFile's:
// the same resources with the same "file#N" sources, and on a problem the same errors.
func TestDirLoaderLargeFileInPieces(t *testing.T) {
	dir := t.TempDir()
	var sb strings.Builder
	for i := 0; i < 3000; i++ {
		if i%7 == 0 {
			sb.WriteString("# a comment document\n---\n") // blank documents are not numbered
		}
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	big := filepath.Join(dir, "inventory.yaml")
	must(t, os.WriteFile(big, []byte(sb.String()), 0o644))
	if n := len(splitPieces([]byte(sb.String()), 4)); n < 2 {
		t.Fatalf("the test file is not cut (%d piece)", n)
	}
	want, err := mesh.LoadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	got := newDirLoader().decodeAll([]string{big})[0]
	if got.err != nil || len(got.res) != len(want) {
		t.Fatalf("got %d resources (err %v), want %d", len(got.res), got.err, len(want))
	}
	for i := range want {
		if got.res[i].GetMeta().Source != want[i].GetMeta().Source || got.res[i].GetMeta().Name != want[i].GetMeta().Name {
			t.Fatalf("resource %d: %s %s, want %s %s", i, got.res[i].GetMeta().Source, got.res[i].GetMeta().Name,
				want[i].GetMeta().Source, want[i].GetMeta().Name)
		}
	}

	// A problem deep inside: the errors are mesh.LoadFile's, document number and line included.
	broken := strings.Replace(sb.String(), "name: svc2500\n", "name: svc2500\nnetwork: {}\n", 1)
	broken = strings.Replace(broken, "name: svc1200\n", "name: svc1200\n  bad: [\n", 1)
	must(t, os.WriteFile(big, []byte(broken), 0o644))
	_, wantErr := mesh.LoadFile(big)
	got = newDirLoader().decodeAll([]string{big})[0]
	if wantErr == nil || got.err == nil || got.err.Error() != wantErr.Error() {
		t.Fatalf("errors differ:\n got: %v\nwant: %v", got.err, wantErr)
	}
}

// A file that could not be read is read again at the next load, even when nothing about
// it changed that its stamp shows (a chmod back to readable changes neither size nor mtime):
// an I/O error is never cached.
func TestDirLoaderNeverCachesReadErrors(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	victim := filepath.Join(dir, "redis.yaml")
	l := newDirLoader()
	l.readFile = func(p string) ([]byte, error) {
		if p == victim {
			return nil, &os.PathError{Op: "open", Path: p, Err: os.ErrPermission}
		}
		return os.ReadFile(p)
	}
	if _, err := l.Load(exampleDataplane, dir); err == nil || !strings.Contains(err.Error(), "redis.yaml") || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("load with an unreadable file: %v", err)
	}
	l.readFile = os.ReadFile // readable again; size, mtime and inode unchanged
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatalf("the read error was cached: %v", err)
	}
}

// The same with a real chmod, where permissions bind (not as root).
func TestDirLoaderChmodBack(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads a file whatever its mode; TestDirLoaderNeverCachesReadErrors covers the rule")
	}
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	victim := filepath.Join(dir, "redis.yaml")
	must(t, os.Chmod(victim, 0))
	l := newDirLoader()
	if _, err := l.Load(exampleDataplane, dir); err == nil {
		t.Fatal("an unreadable file was loaded")
	}
	must(t, os.Chmod(victim, 0o644))
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatalf("after chmod back: %v", err)
	}
}

// Files over the per-file limit, or a model over the total limit, are refused before they
// are read, naming the file, the size, the limit and the flag.
func TestDirLoaderSizeLimits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	big := filepath.Join(dir, "zz-big.yaml")
	var sb strings.Builder
	for i := range 50 {
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	must(t, os.WriteFile(big, []byte(sb.String()), 0o644))

	l := newDirLoader()
	l.maxFile = 4 << 10
	l.readFile = func(p string) ([]byte, error) {
		if p == big {
			t.Errorf("a file over the limit was read")
		}
		return os.ReadFile(p)
	}
	_, err := l.Load(exampleDataplane, dir)
	if err == nil || !strings.Contains(err.Error(), "zz-big.yaml") || !strings.Contains(err.Error(), "over the limit of 4.0 KiB for one file (--max-file-size-mib)") {
		t.Fatalf("per-file limit: %v", err)
	}

	l = newDirLoader()
	l.maxTotal = 8 << 10
	_, err = l.Load(exampleDataplane, dir)
	if err == nil || !strings.Contains(err.Error(), "in all, over the limit") || !strings.Contains(err.Error(), "--max-total-size-mib") {
		t.Fatalf("total limit: %v", err)
	}
	if l.decodes != 0 {
		t.Fatalf("%d files decoded for a model over the total limit", l.decodes)
	}
	l.maxTotal = 0
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatalf("without limits: %v", err)
	}
}

// A cancelled load stops between pieces, says so, and caches nothing: the next load
// decodes the file in full.
func TestDirLoaderCancelled(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	var sb strings.Builder
	for i := range 3000 {
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	must(t, os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(sb.String()), 0o644))
	l := newDirLoader()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l.setContext(ctx)
	if _, err := l.Load(exampleDataplane, dir); err == nil || !strings.Contains(err.Error(), "loading stopped") {
		t.Fatalf("cancelled load: %v", err)
	}
	l.setContext(context.Background())
	snap, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatalf("the load after a cancelled one: %v", err)
	}
	if len(snap.Dataplanes) < 3000 {
		t.Fatalf("%d dataplanes after the cancelled load: something cancelled was cached", len(snap.Dataplanes))
	}
}

// A file rewritten with the same content (a touch, a ConfigMap resync) keeps the resources
// already decoded: the model keeps one copy of them, not two.
func TestDirLoaderSameContentKeepsResources(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	l := newDirLoader()
	first, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	decodes := l.decodes
	later := time.Now().Add(time.Minute)
	for _, e := range mustReadDir(t, dir) {
		must(t, os.Chtimes(filepath.Join(dir, e), later, later))
	}
	second, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	if l.decodes != decodes {
		t.Fatalf("%d files decoded again after a touch", l.decodes-decodes)
	}
	if len(first.Dataplanes) == 0 || first.Dataplanes[0] != second.Dataplanes[0] {
		t.Fatal("a touched file's resources were decoded into new copies")
	}
}

func mustReadDir(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		if !e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out
}

// BenchmarkBytesPerDataplane reports the live heap one dataplane of the inventory costs once
// loaded and allocated (the decoded model and the VIP table both kept, as the agent keeps
// them): go test -run '^$' -bench BytesPerDataplane ./dirsource
func BenchmarkBytesPerDataplane(b *testing.B) {
	const n = 10000
	dir := b.TempDir()
	var sb strings.Builder
	for i := range n {
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	if err := os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(sb.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := newDirLoader()
		snap, err := l.Load(exampleDataplane, dir)
		if err != nil {
			b.Fatal(err)
		}
		alloc, err := vipalloc.New(vipalloc.DefaultConfig())
		if err != nil {
			b.Fatal(err)
		}
		table, err := alloc.Allocate(snap)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/dataplane")
		runtime.KeepAlive(l)
		runtime.KeepAlive(table)
		runtime.KeepAlive(alloc)
	}
}
