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

func TestList(t *testing.T) {
	if got := List([]string{"a", "b"}, 2); got != "a, b" {
		t.Errorf("List of n = %q", got)
	}
	if got := List([]string{"a", "b", "c", "d"}, 2); got != "a, b and 2 more" {
		t.Errorf("List of more than n = %q", got)
	}
}
