package store

import (
	"sync/atomic"
	"testing"
	"time"
)

// Followers done with their lists at about the same time return the memory once, after the
// last; a list done later returns it again.
func TestListDoneReturnsTheMemoryOnceAfterTheLast(t *testing.T) {
	var runs atomic.Int32
	d := &debounce{wait: 300 * time.Millisecond, run: func() { runs.Add(1) }}
	for range 3 {
		d.done()
	}
	waitUntil(t, "the memory returned", func() bool { return runs.Load() >= 1 })
	time.Sleep(600 * time.Millisecond)
	if n := runs.Load(); n != 1 {
		t.Fatalf("returned %d times for three lists done together, want once", n)
	}
	d.done()
	waitUntil(t, "the memory of a later list returned", func() bool { return runs.Load() == 2 })
}
