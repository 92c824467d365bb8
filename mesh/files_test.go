package mesh

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
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
