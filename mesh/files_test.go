package mesh

import (
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

// A Kubernetes ConfigMap volume, mounted through a link: each resource is read once.
func TestResourceFilesConfigMapVolume(t *testing.T) {
	base := t.TempDir()
	vol := filepath.Join(base, "vol")
	ts := filepath.Join(vol, "..2026_11_23_08_00_00.123")
	for _, d := range []string{ts, filepath.Join(vol, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	vo := "type: VirtualOutbound\nmesh: default\nname: vo\nselectors: [{match: {kuma.io/service: \"*\"}}]\nconf: {host: \"{{service}}.mesh\", port: 80, tags: {kuma.io/service: service}}\n"
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(ts, "vo.yaml"), vo)
	write(filepath.Join(vol, "sub", "notes.txt"), "not a resource")
	for _, l := range [][2]string{
		{"..2026_11_23_08_00_00.123", filepath.Join(vol, "..data")},
		{filepath.Join("..data", "vo.yaml"), filepath.Join(vol, "vo.yaml")},
		{vol, filepath.Join(base, "policies")},
	} {
		if err := os.Symlink(l[0], l[1]); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{vol, filepath.Join(base, "policies")} {
		paths, errs := ResourceFiles(dir)
		if errs != nil {
			t.Fatalf("%s: %v", dir, errs)
		}
		if want := []string{filepath.Join(dir, "vo.yaml")}; !reflect.DeepEqual(paths, want) {
			t.Errorf("%s: files %q, want %q", dir, paths, want)
		}
		rs, err := LoadDir(dir)
		if err != nil || len(rs) != 1 {
			t.Errorf("%s: LoadDir: %d resources, %v; want the one VirtualOutbound once", dir, len(rs), err)
		}
	}
}

func TestResourceFilesMissingDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nope")
	_, errs := ResourceFiles(dir)
	if len(errs) == 0 || errs[0].Source != dir {
		t.Fatalf("errors %v, want one naming %s", errs, dir)
	}
}

// A named pipe or a device among the resource files is never read: reading a pipe waits for
// a writer forever (the agent hung at start) and a link to /dev/zero reads until memory runs
// out (2.3 GB in 10 s). Each is an error naming it; the other files are read.
func TestResourceFilesOnlyRegular(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "a.yaml")
	if err := os.WriteFile(good, []byte(dpA), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	dev := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", dev); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var rs []Resource
	var err error
	go func() {
		defer close(done)
		rs, err = LoadDir(dir)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("LoadDir still reading after 10 s")
	}
	want := fifo + ": not a regular file (named pipe): not read\n" + dev + ": not a regular file (device): not read"
	if err == nil || err.Error() != want {
		t.Errorf("error\n got %v\nwant %s", err, want)
	}
	if len(rs) != 1 {
		t.Errorf("%d resources, want a.yaml's one", len(rs))
	}
}
