package dirsource

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// contentLoad stands in for mesh.Load so these tests exercise only the watching: the
// snapshot's hash is a hash of every file read, and a file containing "broken" is refused.
func contentLoad(dataplaneFile, dir string) (*mesh.Snapshot, error) {
	h := sha256.New()
	read := func(p string) error {
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), "broken") {
			return mesh.Errors{{Source: p + "#1", Path: "conf.host", Value: "broken", Msg: "bad"}}
		}
		h.Write([]byte(p))
		h.Write(b)
		return nil
	}
	if err := read(dataplaneFile); err != nil {
		return nil, err
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasPrefix(d.Name(), "..") { // a ConfigMap's own entries
			return nil
		}
		return read(p)
	})
	if err != nil {
		return nil, err
	}
	return &mesh.Snapshot{Hash: hex.EncodeToString(h.Sum(nil))}, nil
}

type fixture struct {
	t      *testing.T
	dpDir  string
	dpFile string
	dir    string
	src    *Files
	out    chan cplink.Update
	cancel context.CancelFunc
	done   chan error
}

func start(t *testing.T, watch string) *fixture {
	t.Helper()
	return startDebounce(t, watch, 20*time.Millisecond)
}

func startDebounce(t *testing.T, watch string, debounce time.Duration) *fixture {
	t.Helper()
	root := t.TempDir()
	fx := &fixture{t: t, dpDir: filepath.Join(root, "dp"), dir: filepath.Join(root, "policies")}
	fx.dpFile = filepath.Join(fx.dpDir, "dataplane.yaml")
	must(t, os.MkdirAll(fx.dpDir, 0o755))
	must(t, os.MkdirAll(fx.dir, 0o755))
	must(t, os.WriteFile(fx.dpFile, []byte("dp v1"), 0o644))
	must(t, os.WriteFile(filepath.Join(fx.dir, "a.yaml"), []byte("a v1"), 0o644))
	// In inotify mode the safety re-scan runs every 10 x PollInterval: keep it out of the
	// test's way (at 50 ms it fired mid-step on a loaded machine and took the change first).
	poll := 50 * time.Millisecond
	if watch == WatchInotify {
		poll = 10 * time.Second
	}
	src, err := NewFiles(FilesConfig{DataplaneFile: fx.dpFile, PoliciesDir: fx.dir, Watch: watch,
		Debounce: debounce, PollInterval: poll, Load: contentLoad}, nil)
	must(t, err)
	fx.src = src
	first := src.Load(context.Background())
	if first.Err != nil || first.Snapshot == nil {
		t.Fatalf("first load: %+v", first)
	}
	ctx, cancel := context.WithCancel(context.Background())
	fx.out, fx.cancel, fx.done = make(chan cplink.Update, 16), cancel, make(chan error, 1)
	go func() { fx.done <- src.Run(ctx, fx.out) }()
	t.Cleanup(fx.stop)
	time.Sleep(30 * time.Millisecond) // let Run set its watches up
	return fx
}

func (fx *fixture) stop() {
	if fx.cancel == nil {
		return
	}
	fx.cancel()
	fx.cancel = nil
	select {
	case err := <-fx.done:
		if err != nil {
			fx.t.Errorf("Run: %v", err)
		}
	case <-time.After(2 * time.Second):
		fx.t.Fatal("Run did not return after cancel")
	}
}

func (fx *fixture) write(rel, content string) {
	fx.t.Helper()
	p := filepath.Join(fx.dir, rel)
	if strings.HasPrefix(rel, "/") {
		p = rel
	}
	must(fx.t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(fx.t, os.WriteFile(p, []byte(content), 0o644))
}

// next waits for an cplink.Update. The product promises a second; the test allows more so that a
// loaded CI machine does not make it flaky (the benchmarks measure the real figure).
func (fx *fixture) next() cplink.Update {
	fx.t.Helper()
	select {
	case u := <-fx.out:
		return u
	case <-time.After(5 * time.Second):
		fx.t.Fatal("no update within 5s")
		return cplink.Update{}
	}
}

func (fx *fixture) none(d time.Duration) {
	fx.t.Helper()
	select {
	case u := <-fx.out:
		fx.t.Fatalf("unexpected update: trigger %s err %v", u.Trigger, u.Err)
	case <-time.After(d):
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestFilesSeesChanges(t *testing.T) {
	for _, watch := range []string{WatchInotify, WatchPoll} {
		t.Run(watch, func(t *testing.T) {
			fx := start(t, watch)
			wantTrigger := map[string]string{WatchInotify: "watch", WatchPoll: "poll"}[watch]
			steps := []struct {
				name string
				do   func()
			}{
				{"edit", func() { fx.write("a.yaml", "a v2 longer") }},
				{"add", func() { fx.write("b.yaml", "b v1") }},
				{"new subdirectory", func() { fx.write("sub/deeper/c.yaml", "c v1") }},
				{"edit in new subdirectory", func() { fx.write("sub/deeper/c.yaml", "c v2 longer") }},
				{"remove", func() { must(t, os.Remove(filepath.Join(fx.dir, "b.yaml"))) }},
				{"rename over", func() {
					fx.write("../tmp.yaml", "a v3 via rename")
					must(t, os.Rename(filepath.Join(fx.dir, "../tmp.yaml"), filepath.Join(fx.dir, "a.yaml")))
				}},
				{"dataplane file", func() { fx.write(fx.dpFile, "dp v2 longer") }},
			}
			prev := ""
			for _, s := range steps {
				s.do()
				u := fx.next()
				if u.Err != nil || u.Snapshot == nil {
					t.Fatalf("%s: %+v", s.name, u)
				}
				if u.Trigger != wantTrigger {
					t.Errorf("%s: trigger %q, want %q", s.name, u.Trigger, wantTrigger)
				}
				if u.Snapshot.Hash == prev {
					t.Errorf("%s: the load did not see the change", s.name)
				}
				prev = u.Snapshot.Hash
				drain(fx.out, 60*time.Millisecond)
			}
		})
	}
}

func drain(ch chan cplink.Update, d time.Duration) {
	for {
		select {
		case <-ch:
		case <-time.After(d):
			return
		}
	}
}

// A directory given with a trailing slash is the same directory: changes in its
// subdirectories are seen.
func TestFilesPoliciesDirWithTrailingSlash(t *testing.T) {
	dir := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	dp := filepath.Join(t.TempDir(), "dp.yaml")
	must(t, os.WriteFile(dp, []byte("dp"), 0o644))
	src, err := NewFiles(FilesConfig{DataplaneFile: dp, PoliciesDir: dir + "/", Watch: WatchInotify, Load: contentLoad,
		Debounce: 10 * time.Millisecond, PollInterval: time.Minute}, nil)
	must(t, err)
	src.Load(context.Background())
	out := make(chan cplink.Update, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	defer func() { cancel(); <-done }()
	time.Sleep(50 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(dir, "sub", "x.yaml"), []byte("x"), 0o644))
	select {
	case u := <-out:
		if u.Err != nil {
			t.Fatal(u.Err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a change in a subdirectory of \"dir/\" was not seen")
	}
}

func TestFilesIgnoresUnrelatedFilesBesideTheDataplane(t *testing.T) {
	fx := start(t, WatchInotify)
	fx.write(filepath.Join(fx.dpDir, "unrelated.log"), "noise")
	fx.none(200 * time.Millisecond)
}

func TestFilesDebouncesBursts(t *testing.T) {
	fx := startDebounce(t, WatchInotify, 300*time.Millisecond)
	for i := 0; i < 30; i++ {
		fx.write("a.yaml", strings.Repeat("x", i+1))
	}
	u := fx.next()
	if u.Err != nil {
		t.Fatal(u.Err)
	}
	// A burst is one load (at most two if the burst straddled the debounce window).
	n := 1
	for len(fx.out) > 0 || func() bool { time.Sleep(500 * time.Millisecond); return len(fx.out) > 0 }() {
		<-fx.out
		n++
	}
	if n > 2 {
		t.Errorf("30 writes gave %d loads, want at most 2", n)
	}
}

func TestFilesReportsRefusals(t *testing.T) {
	fx := start(t, WatchInotify)
	fx.write("bad.yaml", "broken")
	u := fx.next()
	var errs mesh.Errors
	if !errors.As(u.Err, &errs) || !strings.Contains(errs[0].Source, "bad.yaml") {
		t.Fatalf("want mesh.Errors naming bad.yaml, got %v", u.Err)
	}
}

func TestFilesReload(t *testing.T) {
	for _, watch := range []string{WatchInotify, WatchPoll} {
		t.Run(watch, func(t *testing.T) {
			fx := start(t, watch)
			fx.src.Reload()
			if u := fx.next(); u.Trigger != "reload" || u.Err != nil {
				t.Fatalf("got %+v", u)
			}
		})
	}
}

// A Kubernetes ConfigMap volume swaps a "..data" symlink to a new timestamped directory;
// the files seen by the agent are symlinks through it.
func TestFilesConfigMapSwap(t *testing.T) {
	fx := start(t, WatchInotify)
	v1 := filepath.Join(fx.dir, "..2026_01")
	fx.write("..2026_01/cm.yaml", "cm v1")
	must(t, os.Symlink("..2026_01", filepath.Join(fx.dir, "..data")))
	must(t, os.Symlink("..data/cm.yaml", filepath.Join(fx.dir, "cm.yaml")))
	fx.next()
	drain(fx.out, 60*time.Millisecond)

	fx.write("..2026_02/cm.yaml", "cm v2 longer")
	must(t, os.Symlink("..2026_02", filepath.Join(fx.dir, "..data_tmp")))
	must(t, os.Rename(filepath.Join(fx.dir, "..data_tmp"), filepath.Join(fx.dir, "..data")))
	must(t, os.RemoveAll(v1))
	u := fx.next()
	if u.Err != nil {
		t.Fatal(u.Err)
	}
}

func TestNewFilesRejectsBadMode(t *testing.T) {
	_, err := NewFiles(FilesConfig{DataplaneFile: "dp.yaml", Watch: "fanotify"}, nil)
	if err == nil || !strings.Contains(err.Error(), `"fanotify"`) {
		t.Fatalf("want an error naming the mode, got %v", err)
	}
}

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// The policies directory may be a symbolic link (e.g. /etc/kuma-dp/policies -> a release
// directory): it is read, and watched, through the link.
func TestFilesSymlinkedPoliciesDir(t *testing.T) {
	real := t.TempDir()
	copyDir(t, examplePolicies, filepath.Join(real, "policies"))
	link := filepath.Join(t.TempDir(), "policies")
	must(t, os.Symlink(filepath.Join(real, "policies"), link))
	want, err := mesh.Load(exampleDataplane, filepath.Join(real, "policies"))
	must(t, err)
	src, err := NewFiles(FilesConfig{DataplaneFile: exampleDataplane, PoliciesDir: link, Watch: WatchInotify,
		Debounce: 10 * time.Millisecond, PollInterval: time.Minute}, nil) // only inotify can see the change
	must(t, err)
	u := src.Load(context.Background())
	if u.Err != nil || u.Snapshot.Hash != want.Hash {
		t.Fatalf("through the link: err %v, hash %v want %s", u.Err, u.Snapshot, want.Hash)
	}
	out := make(chan cplink.Update, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, out) }()
	defer func() { cancel(); <-done }()
	time.Sleep(50 * time.Millisecond)
	must(t, os.MkdirAll(filepath.Join(link, "sub"), 0o755))
	time.Sleep(50 * time.Millisecond)
	must(t, os.WriteFile(filepath.Join(link, "sub", "extra.yaml"), []byte(strings.ReplaceAll(extraDataplane, "NAME", "extra")), 0o644))
	deadline := time.After(5 * time.Second)
	for {
		select {
		case u := <-out:
			if u.Err == nil && len(u.Snapshot.Dataplanes) == len(want.Dataplanes)+1 {
				return
			}
		case <-deadline:
			t.Fatal("a file in a new subdirectory under the link was not seen")
		}
	}
}

// TestInotifyReaderStackStaysSmall: the inotify reader goroutine lives as long as the
// agent; its read buffer once held its stack at 128 KiB. 16 watchers must add well under
// 16 x 32 KiB of stacks.
func TestInotifyReaderStackStaysSmall(t *testing.T) {
	stacks := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/memory/classes/heap/stacks:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	before := stacks()
	const watchers = 16
	for range watchers {
		start(t, WatchInotify)
	}
	after := stacks()
	if grew := int64(after) - int64(before); grew > watchers*32<<10 {
		t.Fatalf("%d inotify watchers added %d bytes of stacks (%d each), want < 32 KiB each", watchers, grew, grew/watchers)
	}
}
