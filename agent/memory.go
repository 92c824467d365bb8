package agent

import (
	"os"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"sync"
	"time"

	"github.com/kumadp/kuma-dp/internal/gcpace"
)

// The agent's memory policy. The agent runs beside every workload, so what it holds is
// paid once per pod or VM:
//
//   - A model load (decoding, the snapshot, the allocation) leaves garbage, up to several
//     times the size of the model it produces. Once a model is applied (or found
//     unchanged) that garbage is collected and its pages returned to the OS (releaser),
//     instead of staying as heap headroom for a GC that, with DNS answers allocating
//     nothing, may never come: at once after the first model and after loads that
//     allocated 16 MiB or more, else once the changes stop for 2 s (a release is a full
//     GC, 20-90 ms of CPU for 100,000 dataplanes, however small the change).
//   - While the agent runs, the GC starts a cycle when the heap has grown by half of what
//     was live after the previous one (GOGC=50 instead of Go's 100), so that the peak
//     while a large model loads stays near the steady state (100,000 dataplanes: 227 MiB
//     instead of 274 MiB against 171 MiB after the load); answering DNS allocates nothing,
//     so the steady state never pays for it. A GOGC in the environment is left as set.
//   - After each release the Go runtime gets a soft memory limit of 1.5 times what the
//     process then holds, plus 32 MiB: a later load (a file of the inventory
//     edited, every dataplane in it decoded again) collects its garbage as it goes instead
//     of growing the heap to several times the model (100,000 dataplanes: a peak of
//     390 MiB against 157 MiB steady without it). The limit is soft: a model that really
//     needs more gets it (the GC then runs more often, never more than half the CPU), and
//     the next release sets a limit from the new steady state. A GOMEMLIMIT in the
//     environment is left as set.
//   - The same release advises the kernel that the pages of the kuma-dp binary that only
//     starting up and loading used may be reclaimed (binpages_linux.go): ~20 MiB of RSS
//     that serving DNS never reads again.

// gcPercent is the agent's GOGC (see above).
const gcPercent = 50

// allocationGCPercent is the GOGC while a model's VIPs are allocated: allocating builds
// the allocator's state for every hostname within a few hundred milliseconds, faster than
// a GC cycle paced at 50% keeps up with. At 20 (bench/memory.sh against the build before,
// touch included) a 100,000-dataplane load peaked at 117-124 MiB instead of 128-143. With
// the compacted allocator and the first load's garbage released before the resolver
// starts, two runs of bench/memory.sh gave a peak of 80.5 MiB (anonymous 71.6) at 10 and
// 85.5 (78.3) at 20, against 57.3 steady, the second above the 1.5x the agent aims at; 10
// cost 60-90 ms of a 1.3-1.4 s start on a busy node (two builds differing in this constant
// alone, started alternately on that mesh with the other core spinning, two starts each:
// not a benchmark of the repository). With the model 3.9 MiB smaller (a dataplane's meta
// and strings cut), the peak at 10 stayed where it was, 1.41-1.52x the steady state in
// bench/memory.sh; at 5 it was 63.0-68.8 MiB (66.5 on average) against 66.9-72.0 (69.6) at
// 10 in ten starts of each build alternately (load 4-6), the CPU of the start the same
// within its noise (1.9-2.6 s). A GOGC in the environment is left as set.
const allocationGCPercent = 5

// allocationGC holds GOGC at allocationGCPercent (gcpace: a decode cache written meanwhile
// holds its own) unless the environment sets GOGC, and returns what undoes it.
func allocationGC() (restore func()) { return gcpace.Low(allocationGCPercent) }

// tuneGC sets the agent's GOGC unless the environment sets one, and returns what undoes it
// (the memory limit set by releases included).
func tuneGC() (restore func()) {
	prevLimit := debug.SetMemoryLimit(-1)
	restoreGC := gcpace.Set(gcPercent) // under a hold (gcpace.Low), once it ends
	return func() {
		restoreGC()
		debug.SetMemoryLimit(prevLimit)
	}
}

// limitFor is the soft memory limit for a process holding held bytes (see above).
func limitFor(held uint64) int64 {
	return int64(held + held/2 + 32<<20)
}

// heldBytes is the memory the Go runtime holds from the OS: everything it mapped, less
// the heap pages returned.
func heldBytes() uint64 {
	s := []rtmetrics.Sample{{Name: "/memory/classes/total:bytes"}, {Name: "/memory/classes/heap/released:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64() - s[1].Value.Uint64()
}

// setLimit sets the soft memory limit from what the process holds now, unless GOMEMLIMIT
// is set in the environment.
func setLimit() {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return
	}
	debug.SetMemoryLimit(limitFor(heldBytes()))
}

// releaser runs debug.FreeOSMemory off the caller's path, one at a time: a request made
// while one runs makes it run once more afterwards (the garbage of the newer load goes
// too), never two side by side.
//
// A release is a full GC: marking a 100,000-dataplane model (a 48 MB heap) costs 20-90 ms
// of CPU (GODEBUG=gctrace=1, the forced cycles after a start), whatever
// the change left behind. After a model is applied, settle releases at once only when the
// loads since the last release allocated releaseAllocated bytes or more (a new inventory,
// a large edit); a small change (one dataplane, one policy) leaves a few MiB, which the
// release after the changes stop for releaseQuiet collects, so that a burst of changes (a
// rolling deployment) costs one GC, not one per change.
type releaser struct {
	mu             sync.Mutex
	running, again bool
	free           func() // FreeOSMemory, setLimit and releaseBinaryPages when nil (tests count calls)
	// allocated reads the bytes allocated since the process started (a runtime metric
	// when nil; tests count their own).
	allocated func() uint64
	// quiet is releaseQuiet when zero (tests shorten it).
	quiet time.Duration
	// atRelease is allocated() when the last release started; timer is the pending quiet
	// release, if any.
	atRelease uint64
	timer     *time.Timer
	idle      *sync.Cond // broadcast when a run of releases ends (wait)
}

const (
	releaseAllocated = 16 << 20
	releaseQuiet     = 2 * time.Second
)

// allocatedBytes is what the process allocated since it started (r.allocated's count
// when set).
func (r *releaser) allocatedBytes() uint64 {
	if r.allocated != nil {
		return r.allocated()
	}
	s := []rtmetrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	rtmetrics.Read(s)
	return s[0].Value.Uint64()
}

// wait returns once no release is running.
func (r *releaser) wait() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.running {
		if r.idle == nil {
			r.idle = sync.NewCond(&r.mu)
		}
		r.idle.Wait()
	}
}

// settle releases now when the loads since the last release allocated releaseAllocated
// bytes or more, else once no settle came for the quiet time.
func (r *releaser) settle() {
	r.mu.Lock()
	if r.allocatedBytes()-r.atRelease >= releaseAllocated {
		r.mu.Unlock()
		r.release()
		return
	}
	defer r.mu.Unlock()
	quiet := r.quiet
	if quiet == 0 {
		quiet = releaseQuiet
	}
	if r.timer == nil {
		r.timer = time.AfterFunc(quiet, r.release)
		return
	}
	r.timer.Reset(quiet)
}

func (r *releaser) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.timer != nil {
		r.timer.Stop() // this release collects what it waited for
	}
	if r.running {
		r.again = true
		return
	}
	r.running = true
	go func() {
		for {
			r.mu.Lock()
			r.atRelease = r.allocatedBytes()
			free := r.free
			r.mu.Unlock()
			if free == nil {
				debug.FreeOSMemory()
				setLimit()
				releaseBinaryPages() //nolint:errcheck // advice: nothing to do when refused
			} else {
				free()
			}
			r.mu.Lock()
			if !r.again {
				r.running = false
				if r.idle != nil {
					r.idle.Broadcast()
				}
				r.mu.Unlock()
				return
			}
			r.again = false
			r.mu.Unlock()
		}
	}()
}
