package testutil

import (
	"os"
	"path/filepath"
	"testing"
)

// TempFiles writes each file into one temporary directory and returns its path.
func TestTempFiles(t *testing.T) {
	write := TempFiles(t)
	a, b := write("a.yaml", "a: 1\n"), write("sub/b.yaml", "b: 2\n")
	if filepath.Dir(a) != filepath.Dir(filepath.Dir(b)) || filepath.Base(a) != "a.yaml" {
		t.Fatalf("paths %s, %s: want one directory", a, b)
	}
	for path, want := range map[string]string{a: "a: 1\n", b: "b: 2\n"} {
		if got, err := os.ReadFile(path); err != nil || string(got) != want {
			t.Errorf("%s: %q, %v; want %q", path, got, err, want)
		}
	}
}
