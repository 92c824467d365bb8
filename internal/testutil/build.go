package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// GoBinaries builds Go packages into one temporary directory, each at most once per test
// process (a failed build fails every test that asks for it). A package-level value serves
// the whole test binary; TestMain calls Remove after m.Run.
type GoBinaries struct {
	mu    sync.Mutex
	dir   string
	built map[string]error // by output name
}

// Build returns the path of package pkg (relative to the test's directory) built as name.
func (b *GoBinaries) Build(t testing.TB, name, pkg string) string {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.built == nil {
		b.built = map[string]error{}
	}
	if b.dir == "" {
		dir, err := os.MkdirTemp("", "kuma-e2e-bin-")
		if err != nil {
			t.Fatal(err)
		}
		b.dir = dir
	}
	path := filepath.Join(b.dir, name)
	err, done := b.built[name]
	if !done {
		if out, berr := exec.Command("go", "build", "-o", path, pkg).CombinedOutput(); berr != nil {
			err = fmt.Errorf("go build %s: %v\n%s", pkg, berr, out)
		}
		b.built[name] = err
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// RunTests is a TestMain of a package whose tests run binaries: it runs the tests, removes
// the binaries and exits with the tests' code.
func (b *GoBinaries) RunTests(m *testing.M) {
	code := m.Run()
	b.Remove()
	os.Exit(code)
}

// Remove deletes the binaries.
func (b *GoBinaries) Remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}
