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
