package testutil

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// update is the one -update switch of every package's golden files.
var update = flag.Bool("update", false, "rewrite the golden files under testdata/ with what the tests produce")

// Updating reports whether this run rewrites golden files (go test -update): for a test
// that writes a golden file of another form than Golden's (a fuzz corpus, say).
func Updating() bool { return *update }

// Golden compares got with the golden file at path (under the package's testdata/); with
// -update it writes got there first. A difference is reported with its first differing line.
func Golden(t testing.TB, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run '%s' -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from what the test produced; review the difference and rerun with -update if it is intended:\n%s",
			path, FirstDiff(want, got))
	}
}

// FirstDiff is the first line where got differs from want, with its number ("" when equal).
func FirstDiff(want, got []byte) string {
	wl, gl := bytes.Split(want, []byte("\n")), bytes.Split(got, []byte("\n"))
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g []byte
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if !bytes.Equal(w, g) {
			return fmt.Sprintf("line %d (of %d, want %d):\n  want: %s\n  got:  %s", i+1, len(gl), len(wl), w, g)
		}
	}
	return ""
}
