package testutil

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFirstDiff(t *testing.T) {
	for _, tc := range []struct{ want, got, diff string }{
		{"a\nb\n", "a\nb\n", ""},
		{"a\nb\n", "a\nc\n", "line 2 (of 3, want 3):\n  want: b\n  got:  c"},
		{"a\n", "a\nb\n", "line 2 (of 3, want 2):\n  want: \n  got:  b"},
	} {
		if got := FirstDiff([]byte(tc.want), []byte(tc.got)); got != tc.diff {
			t.Errorf("FirstDiff(%q, %q) = %q, want %q", tc.want, tc.got, got, tc.diff)
		}
	}
}

func TestGoldenMatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.golden")
	if err := os.WriteFile(path, []byte("same\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	Golden(t, path, []byte("same\n"))
	if Updating() {
		return
	}
	b, _ := os.ReadFile(path)
	if strings.TrimSpace(string(b)) != "same" {
		t.Errorf("the golden file changed without -update: %q", b)
	}
}

func TestHeapAllocated(t *testing.T) {
	var keep []byte
	if a := HeapAllocated(func() { keep = make([]byte, 1<<20) }); a < 1<<20 {
		t.Errorf("HeapAllocated of a 1 MiB allocation = %d", a)
	}
	_ = keep
	var lb LockedBuffer
	lb.Write([]byte("a line\nsecond one\n"))
	if LineWith(lb.String(), "second") != "second one" || LineWith(lb.String(), "none") != "" {
		t.Errorf("LineWith over %q", lb.String())
	}
}
