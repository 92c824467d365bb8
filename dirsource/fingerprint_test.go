package dirsource

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/kumadp/kuma-dp/cplink"
)

// fingerprint is fingerprinter.take with buffers of its own.
func fingerprint(dataplaneFile, dir string) [32]byte {
	var f fingerprinter
	return f.take(dataplaneFile, dir)
}

// referenceFingerprint is what fingerprint computes, written with filepath.WalkDir and
// stat(2) on each path (the walk the source used to take; it allocates for every file).
func referenceFingerprint(dataplaneFile, dir string) [32]byte {
	h := sha256.New()
	stamp := func(path string) {
		h.Write([]byte(path))
		h.Write([]byte{0})
		var st unix.Stat_t
		if unix.Stat(path, &st) != nil {
			h.Write([]byte("missing"))
			return
		}
		for _, v := range []uint64{uint64(st.Size), uint64(st.Mtim.Sec)*1e9 + uint64(st.Mtim.Nsec), uint64(st.Mode)} {
			h.Write(binary.LittleEndian.AppendUint64(nil, v))
		}
	}
	stamp(dataplaneFile)
	root := walkRoot(dir)
	_ = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if path == root {
			path = dir
		}
		if err != nil && d == nil { // the root is missing
			stamp(path)
			return nil
		}
		if err != nil { // a directory stamped, then not read
			h.Write([]byte("\x00unreadable"))
			return nil
		}
		stamp(path)
		return nil
	})
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// tree writes a policies directory shaped as users keep them: nested directories, a
// Kubernetes ConfigMap volume (files linked through "..data" to a timestamped directory), a
// link to a directory elsewhere (stamped, not walked), a dangling link, and a directory
// of many long names (several getdents reads).
func tree(t *testing.T) (dp, dir string) {
	t.Helper()
	base := t.TempDir()
	dir = filepath.Join(base, "policies")
	dp = filepath.Join(base, "dp.yaml")
	write := func(rel, body string) {
		p := filepath.Join(dir, rel)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o644))
	}
	must(t, os.WriteFile(dp, []byte("type: Dataplane\n"), 0o644))
	write("a.yaml", "a")
	write("z/b.yaml", "bb")
	write("z/y/c.json", "ccc")
	write("cm/..2026_11_26_07_00_00.1/vo.yaml", "vo")
	must(t, os.Symlink("..2026_11_26_07_00_00.1", filepath.Join(dir, "cm", "..data")))
	must(t, os.Symlink("..data/vo.yaml", filepath.Join(dir, "cm", "vo.yaml")))
	elsewhere := filepath.Join(base, "elsewhere")
	must(t, os.MkdirAll(elsewhere, 0o755))
	must(t, os.WriteFile(filepath.Join(elsewhere, "x.yaml"), []byte("x"), 0o644))
	must(t, os.Symlink(elsewhere, filepath.Join(dir, "linked")))
	must(t, os.Symlink("nowhere.yaml", filepath.Join(dir, "dangling.yaml")))
	for i := range 400 {
		write(fmt.Sprintf("many/%s-%03d.yaml", strings.Repeat("n", 60), i), "m")
	}
	return dp, dir
}

// The fingerprint visits what filepath.WalkDir visits, in the same order, and stamps each
// path as stat(2) sees it: it equals the reference for a tree with every shape of entry,
// for a root that is a link to a directory, and for paths that do not exist.
func TestFingerprintMatchesAWalk(t *testing.T) {
	dp, dir := tree(t)
	if got, want := fingerprint(dp, dir), referenceFingerprint(dp, dir); got != want {
		t.Fatalf("fingerprint %x, a walk %x", got, want)
	}
	link := filepath.Join(t.TempDir(), "policies-link")
	must(t, os.Symlink(dir, link))
	if got, want := fingerprint(dp, link), referenceFingerprint(dp, link); got != want {
		t.Fatalf("root a link to a directory: fingerprint %x, a walk %x", got, want)
	}
	gone := filepath.Join(t.TempDir(), "gone")
	if got, want := fingerprint(gone, gone), referenceFingerprint(gone, gone); got != want {
		t.Fatalf("missing paths: fingerprint %x, a walk %x", got, want)
	}
}

// Every change a load would see changes the fingerprint; a look at an unchanged tree does
// not.
func TestFingerprintSeesChanges(t *testing.T) {
	dp, dir := tree(t)
	var fp fingerprinter
	last := fp.take(dp, dir)
	if again := fp.take(dp, dir); again != last {
		t.Fatal("the fingerprint of an unchanged tree changed")
	}
	later := time.Now().Add(time.Hour)
	for _, c := range []struct {
		what   string
		change func()
	}{
		{"a file's content", func() { must(t, os.WriteFile(filepath.Join(dir, "a.yaml"), []byte("aa"), 0o644)) }},
		{"a touch", func() { must(t, os.Chtimes(filepath.Join(dir, "z", "y", "c.json"), later, later)) }},
		{"a file added deep", func() { must(t, os.WriteFile(filepath.Join(dir, "z", "y", "d.yaml"), nil, 0o644)) }},
		{"a file removed", func() { must(t, os.Remove(filepath.Join(dir, "z", "b.yaml"))) }},
		{"a file renamed", func() {
			must(t, os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "a2.yaml")))
		}},
		{"a ConfigMap update (..data swapped)", func() {
			must(t, os.MkdirAll(filepath.Join(dir, "cm", "..2026_11_26_08_00_00.2"), 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "cm", "..2026_11_26_08_00_00.2", "vo.yaml"), []byte("vo v2"), 0o644))
			must(t, os.Symlink("..2026_11_26_08_00_00.2", filepath.Join(dir, "cm", "..data_tmp")))
			must(t, os.Rename(filepath.Join(dir, "cm", "..data_tmp"), filepath.Join(dir, "cm", "..data")))
		}},
		{"the dangling link's target created", func() {
			must(t, os.WriteFile(filepath.Join(dir, "nowhere.yaml"), []byte("n"), 0o644))
		}},
		{"the dataplane file", func() { must(t, os.WriteFile(dp, []byte("type: Dataplane\nname: x\n"), 0o644)) }},
		{"a directory made unreadable", func() {
			if os.Geteuid() == 0 {
				must(t, os.Remove(filepath.Join(dir, "z", "y", "c.json"))) // root reads anything
				return
			}
			must(t, os.Chmod(filepath.Join(dir, "z", "y"), 0o000))
			t.Cleanup(func() { os.Chmod(filepath.Join(dir, "z", "y"), 0o755) })
		}},
	} {
		c.change()
		now := fp.take(dp, dir)
		if now == last {
			t.Errorf("%s: the fingerprint did not change", c.what)
		}
		if ref := referenceFingerprint(dp, dir); now != ref {
			t.Errorf("%s: fingerprint %x, a walk %x", c.what, now, ref)
		}
		last = now
	}
}

// Taking a fingerprint again allocates nothing, however many files the directory holds: the
// source takes one every few seconds for as long as the agent runs.
func TestFingerprintAllocatesNothing(t *testing.T) {
	dp, dir := tree(t)
	var fp fingerprinter
	want := fp.take(dp, dir)
	allocs := testing.AllocsPerRun(20, func() {
		if fp.take(dp, dir) != want {
			t.Fatal("the fingerprint changed")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations a fingerprint of %d+ files, want 0", allocs, 400)
	}
}

func BenchmarkFingerprint(b *testing.B) {
	for _, n := range []int{20000, 100000} {
		b.Run(fmt.Sprintf("files=%d", n), func(b *testing.B) {
			dir := b.TempDir()
			for i := range n {
				must(b, os.WriteFile(filepath.Join(dir, fmt.Sprintf("dp-%06d.yaml", i)), []byte("d"), 0o644))
			}
			dp := filepath.Join(dir, "dp-000000.yaml")
			b.Run("fingerprinter", func(b *testing.B) {
				var fp fingerprinter
				b.ReportAllocs()
				for b.Loop() {
					fp.take(dp, dir)
				}
			})
			b.Run("walk", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					referenceFingerprint(dp, dir)
				}
			})
		})
	}
}

// The checks space out when a look takes long, so that they take at most a twentieth of a
// core; a look records how long it took.
func TestPollSpacesOutSlowLooks(t *testing.T) {
	for _, c := range []struct{ base, took, want time.Duration }{
		{500 * time.Millisecond, time.Millisecond, 500 * time.Millisecond},
		{500 * time.Millisecond, 30 * time.Millisecond, 600 * time.Millisecond},
		{500 * time.Millisecond, 150 * time.Millisecond, 3 * time.Second},
		{5 * time.Second, 150 * time.Millisecond, 5 * time.Second},
	} {
		if got := pollEvery(c.base, c.took); got != c.want {
			t.Errorf("pollEvery(%v, %v) = %v, want %v", c.base, c.took, got, c.want)
		}
	}
	dp, dir := tree(t)
	var fp fingerprinter
	fp.take(dp, dir)
	if fp.lastTook() <= 0 {
		t.Fatalf("a look of %s took %v", dir, fp.lastTook())
	}
}

// The polling source spaces its looks by how long they take: a directory of 20,000 files
// (some 25 ms a look) polled every millisecond is looked at every half second or so, not
// ~40 times a second.
func TestPollingSpacesOut(t *testing.T) {
	dir := t.TempDir()
	for i := range 20000 {
		must(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("dp-%05d.yaml", i)), nil, 0o644))
	}
	dp := filepath.Join(t.TempDir(), "dp.yaml")
	must(t, os.WriteFile(dp, []byte("dp"), 0o644))
	src, err := NewFiles(FilesConfig{DataplaneFile: dp, PoliciesDir: dir, Watch: WatchPoll, PollInterval: time.Millisecond,
		Load: contentLoad}, nil)
	must(t, err)
	if u := src.Load(context.Background()); u.Err != nil {
		t.Fatal(u.Err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, make(chan cplink.Update, 1)) }()
	before := src.fp.taken()
	time.Sleep(2 * time.Second)
	looks := src.fp.taken() - before
	cancel()
	must(t, <-done)
	if looks > 10 {
		t.Fatalf("%d looks at %d files in 2 s, %v each: the polling did not space out", looks, 20000, src.fp.lastTook())
	}
}
