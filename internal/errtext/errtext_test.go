package errtext

import (
	"strings"
	"testing"
)

func TestClip(t *testing.T) {
	if got := Clip("abc", 5); got != "abc" {
		t.Errorf("Clip short = %q", got)
	}
	if got := Clip("aé"+strings.Repeat("x", 10), 2); got != "a... (13 bytes in all)" {
		t.Errorf("Clip on a rune boundary = %q", got)
	}
}
