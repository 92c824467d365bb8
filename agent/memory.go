package agent

import (
	"os"
	"runtime/debug"
	"sync"
)

// The agent's memory policy. The agent runs beside every workload, so what it holds is
// paid once per pod or VM:
//
//   - A model load (decoding, the snapshot, the allocation) leaves garbage several times the
//     size of the model it produces. Once a model is applied (or found unchanged) that
//     garbage is collected and its pages returned to the OS (releaseMemory), instead of
//     staying as heap headroom for a GC that, with DNS answers allocating nothing, may never
//     come.
//   - While the agent runs, the GC starts a cycle when the heap has grown by half of what
//     was live after the previous one (GOGC=50 instead of Go's 100), so that the peak
//     while a large model loads stays near the steady state (100,000 dataplanes: 227 MiB
//     instead of 274 MiB against 171 MiB after the load); answering DNS allocates nothing,
//     so the steady state never pays for it. A GOGC in the environment is left as set.

// gcPercent is the agent's GOGC (see above).
const gcPercent = 50

// tuneGC sets the agent's GOGC unless the environment sets one, and returns what undoes it.
func tuneGC() (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	prev := debug.SetGCPercent(gcPercent)
	return func() { debug.SetGCPercent(prev) }
}

// releaser runs debug.FreeOSMemory off the caller's path, one at a time: a request made
// while one runs makes it run once more afterwards (the garbage of the newer load goes
// too), never two side by side.
type releaser struct {
	mu             sync.Mutex
	running, again bool
	free           func() // debug.FreeOSMemory when nil (tests count calls)
}

func (r *releaser) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.running {
		r.again = true
		return
	}
	r.running = true
	free := r.free
	if free == nil {
		free = debug.FreeOSMemory
	}
	go func() {
		for {
			free()
			r.mu.Lock()
			if !r.again {
				r.running = false
				r.mu.Unlock()
				return
			}
			r.again = false
			r.mu.Unlock()
		}
	}()
}
