package agent

import (
	"os"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"
)

// Requests made while a release runs make one more run after it, never two side by side.
func TestReleaserCoalesces(t *testing.T) {
	var calls, concurrent, maxConcurrent atomic.Int32
	gate := make(chan struct{})
	r := &releaser{free: func() {
		if n := concurrent.Add(1); n > maxConcurrent.Load() {
			maxConcurrent.Store(n)
		}
		if calls.Add(1) == 1 {
			<-gate // the first run waits while more requests come
		}
		concurrent.Add(-1)
	}}
	r.release()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	r.release()
	r.release()
	r.release()
	close(gate)
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		running := r.running
		r.mu.Unlock()
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the releaser is still running")
		}
		time.Sleep(time.Millisecond)
	}
	if calls.Load() != 2 || maxConcurrent.Load() != 1 {
		t.Fatalf("%d runs (want 2: the first, then one for the three requests made during it), %d at once", calls.Load(), maxConcurrent.Load())
	}
	r.release()
	for calls.Load() != 3 {
		time.Sleep(time.Millisecond)
	}
}

// The agent's GOGC, and the lower one while a model is allocated, apply unless the
// environment sets one, and are undone after.
func TestTuneGC(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func() func()
		want int
	}{{"tuneGC", tuneGC, gcPercent}, {"allocationGC", allocationGC, allocationGCPercent}} {
		prev := debug.SetGCPercent(100)
		if v, ok := os.LookupEnv("GOGC"); ok {
			os.Unsetenv("GOGC")
			defer os.Setenv("GOGC", v)
		}
		restore := tc.set()
		if got := debug.SetGCPercent(tc.want); got != tc.want {
			t.Fatalf("%s: GOGC %d while set, want %d", tc.name, got, tc.want)
		}
		restore()
		if got := debug.SetGCPercent(100); got != 100 {
			t.Fatalf("%s: GOGC %d after, want 100 back", tc.name, got)
		}
		t.Setenv("GOGC", "200")
		restore = tc.set()
		if got := debug.SetGCPercent(100); got != 100 {
			t.Fatalf("%s: GOGC %d with GOGC=200 in the environment: the agent must leave it", tc.name, got)
		}
		restore()
		os.Unsetenv("GOGC")
		debug.SetGCPercent(prev)
	}
}

// After a release the runtime's soft limit is 1.5x what the process holds plus 32 MiB;
// a GOMEMLIMIT in the environment is left alone.
func TestReleaseSetsMemoryLimit(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(prev)
	if v, ok := os.LookupEnv("GOMEMLIMIT"); ok {
		os.Unsetenv("GOMEMLIMIT")
		defer os.Setenv("GOMEMLIMIT", v)
	}
	debug.SetMemoryLimit(1 << 62)
	setLimit()
	held := heldBytes()
	got := debug.SetMemoryLimit(-1)
	if got < int64(held)+32<<20 || got > int64(held)*2+64<<20 {
		t.Fatalf("limit %d for %d bytes held, want about %d", got, held, limitFor(held))
	}
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetMemoryLimit(1 << 62)
	setLimit()
	if got := debug.SetMemoryLimit(-1); got != 1<<62 {
		t.Fatalf("limit changed to %d with GOMEMLIMIT set", got)
	}
}

// After a small change the release waits for the changes to stop, and one release follows
// a burst; a change that allocated releaseAllocated or more is released at once.
func TestReleaserSettles(t *testing.T) {
	var calls atomic.Int32
	var allocated atomic.Uint64
	r := &releaser{
		free:      func() { calls.Add(1) },
		allocated: allocated.Load,
		quiet:     300 * time.Millisecond, // well above the burst's 10 ms gaps, even on a loaded machine
	}
	waitCalls := func(want int32, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for calls.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("%d releases after %v, want %d", calls.Load(), within, want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// a burst of small changes, each well within the quiet time of the one before
	for range 5 {
		allocated.Add(1 << 20)
		r.settle()
		time.Sleep(10 * time.Millisecond)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d releases during a burst of small changes, want none until it stops", n)
	}
	waitCalls(1, 5*time.Second)
	time.Sleep(400 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d releases for one burst, want 1", n)
	}

	// a large change: released at once, not after the quiet time
	r.quiet = time.Hour
	allocated.Add(releaseAllocated)
	r.settle()
	waitCalls(2, 2*time.Second)
	// small changes after it add up from that release on
	allocated.Add(releaseAllocated / 2)
	r.settle()
	time.Sleep(50 * time.Millisecond)
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d releases: a change of half the threshold after a release was released at once", n)
	}
	allocated.Add(releaseAllocated / 2)
	r.settle()
	waitCalls(3, 2*time.Second)
	r.mu.Lock()
	pending := r.timer != nil && r.timer.Stop()
	r.mu.Unlock()
	if pending {
		t.Fatal("a quiet release stayed armed after a release collected its garbage")
	}
}

// wait returns once the release running (and the one requested during it) is done, at
// once when none runs.
func TestReleaserWait(t *testing.T) {
	gate := make(chan struct{})
	var calls atomic.Int32
	r := &releaser{free: func() {
		if calls.Add(1) == 1 {
			<-gate
		}
	}}
	r.wait() // nothing running
	r.release()
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	r.release() // during the first: one more after it
	waited := make(chan struct{})
	go func() { r.wait(); close(waited) }()
	select {
	case <-waited:
		t.Fatal("wait returned while a release was running")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not return after the releases")
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d releases when wait returned, want 2", n)
	}
}
