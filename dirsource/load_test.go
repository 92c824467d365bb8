package dirsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
	"weak"

	"github.com/kumadp/kuma-dp/internal/testutil"
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

// loadedCopy is a copy of the example policies and a loader that has loaded it once.
func loadedCopy(t *testing.T) (dir string, l *dirLoader) {
	t.Helper()
	dir = t.TempDir()
	copyDir(t, examplePolicies, dir)
	l = newDirLoader()
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	return dir, l
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
	sixth, err := l.Load(exampleDataplane, dir)
	if err != nil || l.decodes != 2*len(files)+4 {
		t.Fatalf("after forget: err %v, decodes %d", err, l.decodes)
	}
	// Decoded again, the unchanged resources are still the objects the model held.
	for i, dp := range sixth.Dataplanes {
		if dp != fifth.Dataplanes[i] {
			t.Fatalf("after forget, dataplane %s is a new copy", dp.Name)
		}
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

// largeInventory is 3,000 one-inbound dataplanes (named by name(i)) with a comment
// document before every seventh: a file decoded in pieces.
func largeInventory(name func(i int) string) string {
	var sb strings.Builder
	for i := 0; i < 3000; i++ {
		if i%7 == 0 {
			sb.WriteString("# a comment document\n---\n") // blank documents are not numbered
		}
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", name(i)))
	}
	return sb.String()
}

// A large file is decoded in pieces on every core; the result is exactly mesh.LoadFile's:
// the same resources with the same "file#N" sources, and on a problem the same errors.
func TestDirLoaderLargeFileInPieces(t *testing.T) {
	dir := t.TempDir()
	inv := largeInventory(func(i int) string { return fmt.Sprintf("svc%d", i) })
	big := filepath.Join(dir, "inventory.yaml")
	must(t, os.WriteFile(big, []byte(inv), 0o644))
	if n := len(splitPieces([]byte(inv), 4)); n < 2 {
		t.Fatalf("the test file is not cut (%d piece)", n)
	}
	want, err := mesh.LoadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	got := newDirLoader().decodeAll([]string{big})[0]
	sameResources(t, got, want)

	// A problem deep inside: the errors are mesh.LoadFile's, document number and line included.
	broken := strings.Replace(inv, "name: svc2500\n", "name: svc2500\nnetwork: {}\n", 1)
	broken = strings.Replace(broken, "name: svc1200\n", "name: svc1200\n  bad: [\n", 1)
	must(t, os.WriteFile(big, []byte(broken), 0o644))
	_, wantErr := mesh.LoadFile(big)
	got = newDirLoader().decodeAll([]string{big})[0]
	if wantErr == nil || got.err == nil || got.err.Error() != wantErr.Error() {
		t.Fatalf("errors differ:\n got: %v\nwant: %v", got.err, wantErr)
	}
}

// sameResources fails unless got decoded without a problem to want's resources, with the
// same names and "file#N" sources (a decoded file is kept in name order).
func sameResources(t *testing.T, got cachedFile, want []mesh.Resource) {
	t.Helper()
	want = slices.Clone(want)
	slices.SortStableFunc(want, func(a, b mesh.Resource) int { return strings.Compare(a.GetMeta().Name, b.GetMeta().Name) })
	if got.err != nil || len(got.res) != len(want) {
		t.Fatalf("got %d resources (err %v), want %d", len(got.res), got.err, len(want))
	}
	for i := range want {
		if !got.res[i].GetMeta().Source.Same(want[i].GetMeta().Source) || got.res[i].GetMeta().Name != want[i].GetMeta().Name {
			t.Fatalf("resource %d: %s %s, want %s %s", i, got.res[i].GetMeta().Source, got.res[i].GetMeta().Name,
				want[i].GetMeta().Source, want[i].GetMeta().Name)
		}
	}
}

// A problem found once a large file's pieces are put together (a duplicate name, between
// two pieces) names each document by its number in the whole file, as mesh.Load does.
func TestDirLoaderLargeFileInPiecesDuplicateNamesDocuments(t *testing.T) {
	dir := t.TempDir()
	inv := largeInventory(func(i int) string {
		if i == 2500 {
			return "svc10" // document 2501, in the last piece; svc10 is document 11, in the first
		}
		return fmt.Sprintf("svc%d", i)
	})
	big := filepath.Join(dir, "inventory.yaml")
	must(t, os.WriteFile(big, []byte(inv), 0o644))
	pieces := splitPieces([]byte(inv), 4)
	if len(pieces) < 2 || bytes.Contains(pieces[0], []byte("svc2499")) || !bytes.Contains(pieces[0], []byte("svc10\n")) {
		t.Fatalf("the test file is not cut as the test needs (%d pieces)", len(pieces))
	}
	_, wantErr := mesh.Load(exampleDataplane, dir)
	_, err := newDirLoader().Load(exampleDataplane, dir)
	want := big + "#2501: name: duplicate Dataplane name, also defined in " + big + "#11 (value \"svc10\")"
	if wantErr == nil || err == nil || err.Error() != wantErr.Error() || !strings.Contains(err.Error(), want) {
		t.Fatalf("errors differ:\n got: %v\nwant: %v\n(mesh.Load: %v)", err, want, wantErr)
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
// decodes the file in full. The same for a file streamed (streamMin bytes or more).
func TestDirLoaderCancelled(t *testing.T) {
	for _, tc := range []struct {
		name     string
		minBytes int
	}{{"read whole", 0}, {"streamed", streamMin}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "policies")
			copyDir(t, examplePolicies, dir)
			var sb strings.Builder
			n := 0
			for ; n < 3000 || sb.Len() < tc.minBytes; n++ {
				fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", n)))
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
			if len(snap.Dataplanes) < n {
				t.Fatalf("%d dataplanes after the cancelled load, want %d: something cancelled was cached", len(snap.Dataplanes), n)
			}
		})
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

// A load that finds every file as the last snapshot had it - touched, or not touched at
// all - gives back that snapshot, not a copy built at the cost of a model's garbage; an
// edit, a file added or removed, or the dataplane's own file edited gives a new one.
func TestDirLoaderUnchangedLoadGivesBackSnapshot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	dpFile := filepath.Join(t.TempDir(), "dataplane.yaml")
	dpText, err := os.ReadFile(exampleDataplane)
	must(t, err)
	must(t, os.WriteFile(dpFile, dpText, 0o644))
	l := newDirLoader()
	load := func() *mesh.Snapshot {
		t.Helper()
		snap, err := l.Load(dpFile, dir)
		if err != nil {
			t.Fatal(err)
		}
		return snap
	}
	first := load()
	if again := load(); again != first {
		t.Fatal("a load with nothing changed built a new snapshot")
	}
	later := time.Now().Add(time.Minute)
	for _, e := range mustReadDir(t, dir) {
		must(t, os.Chtimes(filepath.Join(dir, e), later, later))
	}
	must(t, os.Chtimes(dpFile, later, later))
	if touched := load(); touched != first {
		t.Fatal("a load after a touch of every file built a new snapshot")
	}

	extra := filepath.Join(dir, "zz-extra.yaml")
	extraText := strings.ReplaceAll(extraDataplane, "NAME", "extra")
	must(t, os.WriteFile(extra, []byte(extraText), 0o644))
	added := load()
	if added == first || len(added.Dataplanes) != len(first.Dataplanes)+1 {
		t.Fatalf("a file added: same snapshot %v, %d dataplanes (was %d)", added == first, len(added.Dataplanes), len(first.Dataplanes))
	}
	must(t, os.WriteFile(extra, []byte(strings.Replace(extraText, "10.9.9.9", "10.9.9.8", 1)), 0o644))
	edited := load()
	if edited == added {
		t.Fatal("an edited file gave back the last snapshot")
	}
	// the file just decoded (of dataplanes alone: kept as pointers to them) is found again
	// as the snapshot had it
	later = later.Add(time.Minute)
	must(t, os.Chtimes(extra, later, later))
	if touched := load(); touched != edited {
		t.Fatal("a load after a touch of the file just edited built a new snapshot")
	}
	if again := load(); again != edited {
		t.Fatal("a load with nothing changed since an edit built a new snapshot")
	}
	// refused, the file is served at its last good version: loaded again, the same
	must(t, os.WriteFile(extra, []byte(extraText+"  bogus: 1\n"), 0o644))
	refused, err := l.Load(dpFile, dir)
	var rf *RefusedFiles
	if !errors.As(err, &rf) || refused == nil || len(refused.Dataplanes) != len(edited.Dataplanes) {
		t.Fatalf("a refused file: %v, %v", refused, err)
	}
	if again, _ := l.Load(dpFile, dir); again != refused {
		t.Fatal("a load with a file still refused built a new snapshot")
	}
	must(t, os.Remove(extra))
	if removed := load(); removed == edited || len(removed.Dataplanes) != len(first.Dataplanes) {
		t.Fatalf("a file removed: %d dataplanes, want %d", len(removed.Dataplanes), len(first.Dataplanes))
	}
	must(t, os.WriteFile(dpFile, append(dpText, []byte("\n# edited\n")...), 0o644))
	if self := load(); self == first || self.Self == nil {
		t.Fatal("an edit of the dataplane's own file gave back the last snapshot")
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
// them), and the heap pages in use for it (live bytes plus holes left by the load's
// garbage): go test -run '^$' -bench BytesPerDataplane ./dirsource
// services=10000: 10,000 dataplanes of one inbound, each its own service (as bench/memory.sh);
// services=1000,replicas=10: the same 10,000 dataplanes as 10 replicas of 1,000 services.
// kubernetes: 10,000 pods of a Kubernetes cluster as Kuma writes their Dataplanes
// (kubePodDataplane): 2,000 workloads of 5 pods.
func BenchmarkBytesPerDataplane(b *testing.B) {
	const n = 10000
	for _, c := range []struct {
		replicas int
		doc      string // "" for kubePodDataplane's
		perFile  bool   // a file per dataplane instead of one file of them all
	}{{1, extraDataplane, false}, {10, extraDataplane, false}, {1, "", false}, {1, extraDataplane, true}} {
		replicas := c.replicas
		name := fmt.Sprintf("services=%d", n)
		if replicas > 1 {
			name = fmt.Sprintf("services=%d,replicas=%d", n/replicas, replicas)
		}
		if c.doc == "" {
			name = "kubernetes"
		}
		if c.perFile {
			name += ",file-per-dataplane"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			var sb strings.Builder
			for i := range n {
				doc := kubePodDataplane(i)
				if c.doc != "" {
					doc = strings.ReplaceAll(c.doc, "NAME", fmt.Sprintf("svc%d", i/replicas))
					doc = strings.Replace(doc, "name: svc", fmt.Sprintf("name: r%d-svc", i%replicas), 1)
				}
				if c.perFile {
					if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("dp-%05d.yaml", i)), []byte(doc), 0o644); err != nil {
						b.Fatal(err)
					}
					continue
				}
				fmt.Fprintf(&sb, "%s---\n", doc)
			}
			if !c.perFile {
				if err := os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(sb.String()), 0o644); err != nil {
					b.Fatal(err)
				}
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
				if len(snap.Dataplanes) != n+1 {
					b.Fatalf("%d dataplanes, want %d", len(snap.Dataplanes), n+1)
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
				runtime.GC() // a second one drops what sync.Pools keep (json's encoding buffers)
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/dataplane")
				// What the heap holds for them: the live bytes plus the holes between them
				// that the load's garbage left in the same pages (not returned to the OS).
				b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/n, "inuse-bytes/dataplane")
				runtime.KeepAlive(l)
				runtime.KeepAlive(table)
				runtime.KeepAlive(alloc)
			}
		})
	}
}

// A file decoded again after an edit keeps the objects of the resources that did not
// change (the model holds one copy of them, and the allocator compares them by pointer);
// a changed dataplane gets its unchanged inbounds' tag maps from its previous version.
func TestDirLoaderEditKeepsUnchangedResources(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	doc := func(name, address string) string {
		return strings.Replace(strings.ReplaceAll(extraDataplane, "NAME", name), "10.9.9.9", address, 1) + "---\n"
	}
	inv := filepath.Join(dir, "inventory.yaml")
	var sb strings.Builder
	for i := range 3000 {
		sb.WriteString(doc(fmt.Sprintf("svc%d", i), "10.9.9.9"))
	}
	must(t, os.WriteFile(inv, []byte(sb.String()), 0o644))
	l := newDirLoader()
	first, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := func(s *mesh.Snapshot) map[string]*mesh.Dataplane {
		m := map[string]*mesh.Dataplane{}
		for _, dp := range s.Dataplanes {
			m[dp.Name] = dp
		}
		return m
	}
	before := byName(first)
	// svc7 moves to another address; a new dataplane is appended.
	edited := strings.Replace(sb.String(), doc("svc7", "10.9.9.9"), doc("svc7", "10.9.9.7"), 1) + doc("late", "10.9.9.9")
	must(t, os.WriteFile(inv, []byte(edited), 0o644))
	decodes := l.decodes
	second, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	if l.decodes != decodes+1 {
		t.Fatalf("%d files decoded for one edit", l.decodes-decodes)
	}
	after := byName(second)
	same := 0
	for name, dp := range after {
		old, ok := before[name]
		switch {
		case name == "late":
			if ok {
				t.Fatal("late existed before")
			}
		case name == "svc7":
			if dp == old || dp.Networking.Address != "10.9.9.7" {
				t.Fatalf("svc7 not updated: %+v", dp.Networking)
			}
			if reflect.ValueOf(dp.Networking.Inbound[0].Tags).Pointer() != reflect.ValueOf(old.Networking.Inbound[0].Tags).Pointer() {
				t.Error("svc7's unchanged inbound tags are a new map")
			}
		case dp == old:
			same++
		}
	}
	if want := len(before); same != want-1 {
		t.Fatalf("%d of %d unchanged resources kept their object", same, want-1)
	}

	// A document inserted at the top moves every other one: each gets its new number (as
	// mesh.LoadFile numbers them) and still shares its maps with the previous decode.
	must(t, os.WriteFile(inv, []byte(doc("first", "10.9.9.1")+edited), 0o644))
	third, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	want, err := mesh.LoadFile(inv)
	if err != nil {
		t.Fatal(err)
	}
	wantSource := map[string]mesh.Source{}
	for _, r := range want {
		wantSource[r.GetMeta().Name] = r.GetMeta().Source
	}
	moved := 0
	for name, dp := range byName(third) {
		if w, ok := wantSource[name]; ok && !dp.Source.Same(w) {
			t.Fatalf("%s: source %q, want %q", name, dp.Source, w)
		}
		if old := after[name]; old != nil && strings.HasPrefix(name, "svc") {
			if reflect.ValueOf(dp.Networking.Inbound[0].Tags).Pointer() != reflect.ValueOf(old.Networking.Inbound[0].Tags).Pointer() {
				t.Fatalf("%s moved down one document and got a new tag map", name)
			}
			moved++
		}
	}
	if moved != 3000 {
		t.Fatalf("%d moved dataplanes checked, want 3000", moved)
	}
}

// BenchmarkReuseUnchanged10k: what keeping the unchanged resources of a 10,000-dataplane
// file decoded again costs (a DeepEqual per resource), beside decoding it:
// go test -run '^$' -bench ReuseUnchanged10k -benchmem ./cplink
func BenchmarkReuseUnchanged10k(b *testing.B) {
	var sb strings.Builder
	for i := range 10000 {
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	data := []byte(sb.String())
	prev, err := mesh.Decode("inventory.yaml", data)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		fresh, err := mesh.Decode("inventory.yaml", data)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		reuseUnchanged(prev, fresh)
		if fresh[9999] != prev[9999] {
			b.Fatal("an unchanged resource was not reused")
		}
	}
}

// A file rewritten with the same bytes is recognised by its hash without being read into
// memory whole (readFile is not called for it); a changed file is read and decoded.
func TestDirLoaderSameContentNotReadWhole(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	l := newDirLoader()
	reads := map[string]int{}
	l.readFile = func(p string) ([]byte, error) {
		reads[filepath.Base(p)]++
		return os.ReadFile(p)
	}
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(dir, "redis.yaml")
	b, err := os.ReadFile(victim)
	must(t, err)
	later := time.Now().Add(time.Minute)
	must(t, os.Chtimes(victim, later, later)) // a touch: the stamp changes, the bytes do not
	decodes := l.decodes
	clear(reads)
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	if reads["redis.yaml"] != 0 || l.decodes != decodes {
		t.Errorf("a touched file: read whole %d times, %d decodes, want 0 and 0", reads["redis.yaml"], l.decodes-decodes)
	}
	must(t, os.WriteFile(victim, append(b, []byte("\n# edited\n")...), 0o644))
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	if reads["redis.yaml"] != 1 || l.decodes != decodes+1 {
		t.Errorf("an edited file: read whole %d times, %d decodes, want 1 and 1", reads["redis.yaml"], l.decodes-decodes)
	}
}

// A file of streamMin bytes or more is read a piece at a time: the result is still exactly
// mesh.LoadFile's (resources, "file#N" sources, and on a problem the errors), its hash is
// the file's, and the pieces are those splitPieces cuts from the file read whole - a line
// longer than the read buffer included.
func TestDirLoaderStreamsLargeFile(t *testing.T) {
	var sb strings.Builder
	for i := 0; sb.Len() < streamMin+streamMin/4; i++ {
		if i == 1000 {
			sb.WriteString("# " + strings.Repeat("x", 200<<10) + "\n---\n") // a 200 KiB line
		}
		fmt.Fprintf(&sb, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("svc%d", i)))
	}
	inv := sb.String()
	big := filepath.Join(t.TempDir(), "inventory.yaml")
	must(t, os.WriteFile(big, []byte(inv), 0o644))

	var pieces [][]byte
	sum, err := streamPieces(big, int64(len(inv)), 4, func(p []byte) error { pieces = append(pieces, p); return nil })
	must(t, err)
	if sum != digestOf([]byte(inv)) {
		t.Fatal("the streamed hash is not the file's")
	}
	whole := splitPieces([]byte(inv), pieceCount(len(inv), 4))
	if len(pieces) < 2 || len(pieces) != len(whole) {
		t.Fatalf("%d pieces streamed, %d cut from the file read whole", len(pieces), len(whole))
	}
	for k := range whole {
		if !bytes.Equal(pieces[k], whole[k]) {
			t.Fatalf("piece %d differs from the one cut from the file read whole", k)
		}
	}

	want, err := mesh.LoadFile(big)
	must(t, err)
	l := newDirLoader()
	l.readFile = func(p string) ([]byte, error) { t.Errorf("%s read whole", p); return os.ReadFile(p) }
	got := l.decodeAll([]string{big})[0]
	sameResources(t, got, want)
	if got.sum != digestOf([]byte(inv)) {
		t.Fatal("the cached hash is not the file's")
	}

	// A problem deep inside: the file is read whole once, and the errors are mesh.LoadFile's.
	broken := strings.Replace(inv, "name: svc20000\n", "name: svc20000\nnetwork: {}\n", 1)
	must(t, os.WriteFile(big, []byte(broken), 0o644))
	_, wantErr := mesh.LoadFile(big)
	l = newDirLoader()
	got = l.decodeAll([]string{big})[0]
	if wantErr == nil || got.err == nil || got.err.Error() != wantErr.Error() {
		t.Fatalf("errors differ:\n got: %v\nwant: %v", got.err, wantErr)
	}
}

// A named pipe or a link to a device among the policies is refused by name, never read: the
// agent waited forever for a writer at start (a pipe) or read until memory ran out (a link
// to /dev/zero, whose size is 0 and so passes the size limits).
func TestDirLoaderNeverReadsPipesOrDevices(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	fifo := filepath.Join(dir, "zz-fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	must(t, os.Symlink("/dev/zero", filepath.Join(dir, "zz-zero.yaml")))
	l := newDirLoader()
	load := func() (*mesh.Snapshot, error) {
		t.Helper()
		type result struct {
			s   *mesh.Snapshot
			err error
		}
		done := make(chan result, 1)
		go func() {
			s, err := l.Load(exampleDataplane, dir)
			done <- result{s, err}
		}()
		select {
		case r := <-done:
			return r.s, r.err
		case <-time.After(10 * time.Second):
			t.Fatal("still loading after 10 s")
		}
		return nil, nil
	}
	// Each is a file refused, left out: the other files are served (a pipe dropped in the
	// directory every agent reads does not keep them all from starting).
	s, err := load()
	var rf *RefusedFiles
	if s == nil || !errors.As(err, &rf) || len(rf.Files) != 2 || rf.Files[0].Kept || rf.Files[1].Kept ||
		!strings.Contains(err.Error(), "zz-fifo.yaml: not a regular file (named pipe)") ||
		!strings.Contains(err.Error(), "zz-zero.yaml: not a regular file (device)") {
		t.Fatalf("want a snapshot and the pipe and the device refused, named: %v", err)
	}
	// A good file replaced by a pipe: its last good version stays.
	redis := filepath.Join(dir, "redis.yaml")
	must(t, os.Remove(redis))
	if err := syscall.Mkfifo(redis, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = load()
	if s == nil || !errors.As(err, &rf) || len(rf.Files) != 3 || !strings.Contains(err.Error(), "redis.yaml: not a regular file (named pipe)") ||
		!slices.ContainsFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "redis-1" }) {
		t.Fatalf("a file replaced by a pipe: want its last good version served, got %v", err)
	}
	for _, f := range rf.Files {
		if f.Kept != (f.Path == redis) {
			t.Errorf("%s kept: %v", f.Path, f.Kept)
		}
	}
}

// A file refused is served at its last good version, a new one refused is left out, and
// both are reported beside the snapshot; the other files' changes are taken meanwhile.
func TestDirLoaderRefusedFileKeepsItsLastGood(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	l := newDirLoader()
	has := func(s *mesh.Snapshot, name string) bool {
		return slices.ContainsFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == name })
	}
	s, err := l.Load(exampleDataplane, dir)
	if err != nil || !has(s, "redis-1") {
		t.Fatalf("first load: %v", err)
	}
	redis := filepath.Join(dir, "redis.yaml")
	good, _ := os.ReadFile(redis)
	must(t, os.WriteFile(redis, []byte(strings.Replace(string(good), "  address: 10.0.3.1", "  adress: 10.0.3.1", 1)), 0o644))
	extra := filepath.Join(dir, "extra.yaml")
	must(t, os.WriteFile(extra, []byte(strings.ReplaceAll(extraDataplane, "NAME", "extra")), 0o644))
	fresh := filepath.Join(dir, "fresh.yaml")
	must(t, os.WriteFile(fresh, []byte("type: VirtualOutbound\nmesh: default\nname: fresh\nconf: {hosts: x}\n"), 0o644))

	for range 2 { // the second load, nothing changed, gives the same
		s, err = l.Load(exampleDataplane, dir)
		var rf *RefusedFiles
		if s == nil || !errors.As(err, &rf) {
			t.Fatalf("want a snapshot and RefusedFiles, got %v, %v", s, err)
		}
		if len(rf.Files) != 2 || rf.Files[0].Path != fresh || rf.Files[0].Kept || rf.Files[1].Path != redis || !rf.Files[1].Kept { // in lexical order
			t.Fatalf("refused files: %+v", rf.Files)
		}
		var errs mesh.Errors
		if !errors.As(err, &errs) || !strings.Contains(err.Error(), "adress") {
			t.Errorf("the error does not name the field: %v", err)
		}
		if !has(s, "redis-1") || !has(s, "extra") {
			t.Errorf("want redis-1 (its last good version) and extra (a change of another file) served")
		}
		if r := s.Dataplanes[slices.IndexFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "redis-1" })]; r.Networking.Address != "10.0.3.1" {
			t.Errorf("redis-1 served with address %q", r.Networking.Address)
		}
	}
	// A problem between files accepted (extra and a copy of it) refuses the load whole.
	twin := filepath.Join(dir, "twin.yaml")
	must(t, os.WriteFile(twin, []byte(strings.ReplaceAll(extraDataplane, "NAME", "extra")), 0o644))
	if s, err := l.Load(exampleDataplane, dir); s != nil || err == nil || !strings.Contains(err.Error(), `"extra"`) {
		t.Fatalf("the same dataplane in two files: %v, %v", s, err)
	}
	must(t, os.Remove(twin))
	// Deleted while refused: gone, as any deleted file.
	must(t, os.Remove(redis))
	must(t, os.Remove(fresh))
	if s, err = l.Load(exampleDataplane, dir); err != nil || has(s, "redis-1") {
		t.Fatalf("after the refused files are deleted: %v, redis-1 served %v", err, s != nil && has(s, "redis-1"))
	}
}

// A file refused keeps nothing of its broken content: the resources decoded beside its
// errors are never served, nor held by the cache until the file changes again (a large
// inventory broken in one place would otherwise stay in memory, as a second copy of it).
func TestDirLoaderRefusedFileHoldsNoPartialDecode(t *testing.T) {
	dir, l := loadedCopy(t)
	inv := filepath.Join(dir, "zz-inventory.yaml")
	var b strings.Builder
	for i := range 50 {
		fmt.Fprintf(&b, "%s---\n", strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("inv-%d", i)))
	}
	b.WriteString("type: Bogus\nname: x\n")
	must(t, os.WriteFile(inv, []byte(b.String()), 0o644))
	s, err := l.Load(exampleDataplane, dir)
	var rf *RefusedFiles
	if s == nil || !errors.As(err, &rf) || len(rf.Files) != 1 || rf.Files[0].Kept {
		t.Fatalf("want the new broken file refused and left out: %v", err)
	}
	if slices.ContainsFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return strings.HasPrefix(d.Name, "inv-") }) {
		t.Error("a resource of the refused file is served")
	}
	if n := len(l.cache.entry(inv).res); n != 0 {
		t.Errorf("the cache holds %d resources decoded from the refused file", n)
	}
}

// A resource moved from a file now refused to another file is served from the file that
// holds it now: the refused file's last good version gives way, instead of the two
// copies refusing the whole load (every other change held back by the broken file, and
// the error naming a file that no longer defines the resource).
func TestDirLoaderRefusedFileGivesWayToAMovedResource(t *testing.T) {
	dir, l := loadedCopy(t)
	redis := filepath.Join(dir, "redis.yaml")
	good, _ := os.ReadFile(redis)
	moved := filepath.Join(dir, "zz-moved.yaml")
	must(t, os.WriteFile(moved, bytes.Replace(good, []byte("10.0.3.1"), []byte("10.0.3.9"), 1), 0o644))
	must(t, os.WriteFile(redis, []byte("type: Bogus\nname: x\n"), 0o644))
	extra := filepath.Join(dir, "zz-extra.yaml")
	must(t, os.WriteFile(extra, []byte(strings.ReplaceAll(extraDataplane, "NAME", "extra")), 0o644))
	var first *mesh.Snapshot
	for i := range 2 {
		s, err := l.Load(exampleDataplane, dir)
		var rf *RefusedFiles
		if s == nil || !errors.As(err, &rf) || len(rf.Files) != 1 || rf.Files[0].Path != redis {
			t.Fatalf("load %d: want a snapshot with redis.yaml refused, got %v", i, err)
		}
		at := slices.IndexFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "redis-1" })
		if at < 0 || s.Dataplanes[at].Networking.Address != "10.0.3.9" || !strings.Contains(s.Dataplanes[at].Source.String(), "zz-moved.yaml") {
			t.Fatalf("load %d: redis-1 not served from the file it moved to", i)
		}
		if !slices.ContainsFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "extra" }) {
			t.Fatalf("load %d: another file's change held back", i)
		}
		if i == 1 && s != first {
			t.Error("nothing changed, yet the snapshot was built again")
		}
		first = s
	}
}

// A resource of another mesh named as one of a refused file's last good version does not
// take its place: only what would be the same resource in the snapshot makes it give way.
func TestDirLoaderRefusedFileKeepsWhatAnotherMeshNames(t *testing.T) {
	dir, l := loadedCopy(t)
	redis := filepath.Join(dir, "redis.yaml")
	good, _ := os.ReadFile(redis)
	must(t, os.WriteFile(filepath.Join(dir, "zz-other.yaml"), bytes.Replace(good, []byte("mesh: default"), []byte("mesh: other"), 1), 0o644))
	must(t, os.WriteFile(redis, []byte("type: Bogus\nname: x\n"), 0o644))
	s, err := l.Load(exampleDataplane, dir)
	var rf *RefusedFiles
	if s == nil || !errors.As(err, &rf) {
		t.Fatalf("want redis.yaml refused: %v", err)
	}
	if !slices.ContainsFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "redis-1" }) {
		t.Fatal("redis-1 of the refused file's last good version dropped for a dataplane of another mesh")
	}
}

// A refused file fixed gives back the objects of its last good version for the resources
// that did not change (as any file edited does): the model does not get a second copy of
// every dataplane of an inventory that was broken in one place.
func TestDirLoaderFixedFileReusesItsLastGood(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	inv := filepath.Join(dir, "zz-inventory.yaml")
	doc := func(i int, field string) string {
		return strings.Replace(strings.ReplaceAll(extraDataplane, "NAME", fmt.Sprintf("inv-%d", i)), "address:", field+":", 1) + "---\n"
	}
	write := func(broken, last string) {
		var b strings.Builder
		for i := range 20 {
			field := "address"
			if i == 10 {
				field = broken
			}
			b.WriteString(doc(i, field))
		}
		b.WriteString(strings.ReplaceAll(extraDataplane, "NAME", last))
		must(t, os.WriteFile(inv, []byte(b.String()), 0o644))
		future := time.Now().Add(time.Duration(len(last)) * time.Hour)
		must(t, os.Chtimes(inv, future, future))
	}
	write("address", "last")
	l := newDirLoader()
	before, err := l.Load(exampleDataplane, dir)
	must(t, err)
	write("adress", "last")
	if _, err := l.Load(exampleDataplane, dir); err == nil {
		t.Fatal("the broken inventory was accepted")
	}
	write("address", "last-renamed")
	after, err := l.Load(exampleDataplane, dir)
	must(t, err)
	byName := map[string]*mesh.Dataplane{}
	for _, d := range before.Dataplanes {
		byName[d.Name] = d
	}
	for _, d := range after.Dataplanes {
		if strings.HasPrefix(d.Name, "inv-") && byName[d.Name] != d {
			t.Fatalf("%s is a new copy after the fix", d.Name)
		}
	}
}

// A file replaced by a named pipe after the directory was listed is never read either (an
// open of a pipe without a writer waits forever, and the load with it): it is refused as
// one that is not a regular file.
func TestDirLoaderFileTurnedPipeWhileLoading(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "policies")
	copyDir(t, examplePolicies, dir)
	redis := filepath.Join(dir, "redis.yaml")
	l := newDirLoader()
	read := l.readFile
	l.readFile = func(p string) ([]byte, error) {
		if filepath.Base(p) == "dataplanes.yaml" { // read before redis.yaml
			if _, err := os.Stat(redis); err == nil {
				must(t, os.Remove(redis))
				must(t, syscall.Mkfifo(redis, 0o644))
			}
		}
		return read(p)
	}
	done := make(chan error, 1)
	go func() {
		_, err := l.Load(exampleDataplane, dir)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "redis.yaml") || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("want redis.yaml refused as not a regular file, got %v", err)
		}
	case <-time.After(10 * time.Second):
		os.WriteFile(redis, nil, 0o644) // a writer: the blocked open returns
		t.Fatal("still loading after 10 s: the pipe was opened")
	}
}

// A file over the limit for one file is refused before it is read, as a file: it does not
// count in the total either, so it cannot push the model over --max-total-size-mib and
// refuse every other file's change with it.
func TestDirLoaderOversizedFileNotInTheTotal(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	l := newDirLoader()
	l.maxFile, l.maxTotal = 16<<10, 64<<10
	if _, err := l.Load(exampleDataplane, dir); err != nil {
		t.Fatal(err)
	}
	must(t, os.WriteFile(filepath.Join(dir, "zz-huge.yaml"), bytes.Repeat([]byte("# padding\n"), 10<<10), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "zz-extra.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "extra")), 0o644))
	s, err := l.Load(exampleDataplane, dir)
	var rf *RefusedFiles
	if s == nil || !errors.As(err, &rf) || len(rf.Files) != 1 || !strings.Contains(err.Error(), "--max-file-size-mib") {
		t.Fatalf("want the huge file refused alone, got %v", err)
	}
	if !slices.ContainsFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "extra" }) {
		t.Error("another file's change held back")
	}
	// The files read still count: over the total, the load is refused whole.
	l.maxTotal = 8 << 10
	if s, err := l.Load(exampleDataplane, dir); s != nil || err == nil || !strings.Contains(err.Error(), "--max-total-size-mib") {
		t.Fatalf("over the total: %v, %v", s != nil, err)
	}
}

// A ConfigMap key removed leaves its symlink dangling until the kubelet deletes it, after the
// ..data swap: the file is absent (its resources gone, as at the next listing), not refused
// with "no such file or directory" and named again as accepted a load later.
func TestDirLoaderDanglingSymlinkIsAbsent(t *testing.T) {
	dir, l := loadedCopy(t)
	redis := filepath.Join(dir, "redis.yaml")
	must(t, os.Remove(redis))
	must(t, os.Symlink(filepath.Join(dir, "..data", "redis.yaml"), redis))
	s, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatalf("a dangling symlink: %v", err)
	}
	if slices.ContainsFunc(s.Dataplanes, func(d *mesh.Dataplane) bool { return d.Name == "redis-1" }) {
		t.Error("the removed key's dataplane is still served")
	}
}

// entry is the cache's entry for path (the zero one when it has none).
func (c *fileCache) entry(path string) cachedFile {
	f, _ := c.get(path)
	return f
}

// A DNSZone in the policies directory is refused (it is only ever the control plane's own,
// sent over its link): the file is named with the kind, and the resolver is never handed a
// zone a user wrote ($GENERATE in one took an agent to 2.77 GB).
func TestDirLoaderRefusesDNSZoneFile(t *testing.T) {
	dir := t.TempDir()
	copyDir(t, examplePolicies, dir)
	zone := filepath.Join(dir, "zone.yaml")
	must(t, os.WriteFile(zone, []byte(testutil.GeneratingZone()), 0o644))
	s, err := newDirLoader().Load(exampleDataplane, dir)
	var rf *RefusedFiles
	if s == nil || !errors.As(err, &rf) || len(rf.Files) != 1 || rf.Files[0].Path != zone {
		t.Fatalf("want the zone file refused alone, got %v, %v", s, err)
	}
	if !strings.Contains(err.Error(), `dnszone "evil.test"`) || !strings.Contains(err.Error(), "built by the control plane") {
		t.Errorf("the refusal does not say why: %v", err)
	}
	if len(s.DNSZones) != 0 || len(s.Dataplanes) == 0 {
		t.Errorf("served %d zones from a file, %d dataplanes", len(s.DNSZones), len(s.Dataplanes))
	}
}

// An edited dataplane keeps its unchanged tag set (the allocator compares sets by pointer)
// and nothing else of its old version: the set is an object of its own, so the old
// dataplane's object goes with the garbage.
func TestEditedDataplaneDropsItsOldObject(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "extra.yaml")
	must(t, os.WriteFile(path, []byte(strings.ReplaceAll(extraDataplane, "NAME", "extra")), 0o644))
	l := newDirLoader()
	find := func(s *mesh.Snapshot) *mesh.Dataplane {
		for _, dp := range s.Dataplanes {
			if dp.Name == "extra" {
				return dp
			}
		}
		t.Fatal("no dataplane extra")
		return nil
	}
	first, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	old := find(first)
	oldTags := &old.Networking.Inbound[0].Tags[0]
	gone := weak.Make(old)
	old, first = nil, nil
	future := time.Now().Add(time.Hour)
	must(t, os.WriteFile(path, []byte(strings.ReplaceAll(strings.ReplaceAll(extraDataplane, "NAME", "extra"), "10.9.9.9", "10.9.9.10")), 0o644))
	must(t, os.Chtimes(path, future, future))
	second, err := l.Load(exampleDataplane, dir)
	if err != nil {
		t.Fatal(err)
	}
	edited := find(second)
	if edited.Networking.Address != "10.9.9.10" || &edited.Networking.Inbound[0].Tags[0] != oldTags {
		t.Fatalf("edited dataplane: address %s, tags %p want the old set %p", edited.Networking.Address, &edited.Networking.Inbound[0].Tags[0], oldTags)
	}
	runtime.GC()
	runtime.GC()
	if gone.Value() != nil {
		t.Error("the edited dataplane's old version is still alive: its unchanged tag set keeps it")
	}
	runtime.KeepAlive(second)
}
