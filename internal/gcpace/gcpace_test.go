package gcpace

import (
	"os"
	"runtime/debug"
	"testing"
)

func gogc() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

// Overlapping holds, released in any order, leave GOGC at the lowest still held and, at
// the end, at what it was before the first: one part's end never undoes another's hold.
func TestOverlappingHoldsRestoreWhatWasBefore(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set in the environment: gcpace leaves it as set")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(50))
	var a, b, c func()
	for i, s := range []struct {
		do   func()
		want int
	}{
		{func() { a = Low(10) }, 10},
		{func() { b = Low(5) }, 5},
		{func() { c = Low(20) }, 5},
		{func() { b() }, 10},
		{func() { b() }, 10}, // a second call does nothing
		{func() { a() }, 20},
		{func() { c() }, 50},
	} {
		s.do()
		if got := gogc(); got != s.want {
			t.Fatalf("step %d: GOGC %d, want %d", i, got, s.want)
		}
	}
}

// The process's pace set while a hold is on (Set) takes effect when the holds end, not
// over the hold; its restore puts back the pace before it.
func TestSetUnderAHoldWaitsForItsEnd(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set in the environment: gcpace leaves it as set")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	release := Low(5)
	undo := Set(50)
	if got := gogc(); got != 5 {
		t.Fatalf("Set(50) under Low(5): GOGC %d, want 5 until the hold ends", got)
	}
	release()
	if got := gogc(); got != 50 {
		t.Fatalf("the hold ended: GOGC %d, want 50 (Set's)", got)
	}
	undo()
	if got := gogc(); got != 100 {
		t.Fatalf("Set undone: GOGC %d, want 100 (before it)", got)
	}
}
