// Package gcpace owns the process's GOGC: the pace a process runs at (Set), and the lower
// pace it takes for a while (Low), for the parts of a process that
// make garbage faster than a cycle paced at the process's GOGC keeps up with (the agent's
// allocation of a model's VIPs, its write of a large decode cache), so that the heap does
// not grow by that garbage before a cycle collects it. Holds may overlap (a write while the
// next model is allocated): GOGC is then the lowest held, and once none is held, what it
// was before the first - one part's end never undoes another's hold.
package gcpace

import (
	"os"
	"runtime/debug"
	"slices"
	"sync"
)

var (
	mu   sync.Mutex
	held []int // the percents held now
	base int   // GOGC outside the holds, while there are holds
)

// Set makes p the GOGC outside the holds - now, or once the holds end - until restore is
// called (once), which puts back the one before. A GOGC set in the environment is left as
// set.
func Set(p int) (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	mu.Lock()
	prev := setBase(p)
	mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			setBase(prev)
			mu.Unlock()
		})
	}
}

// setBase makes p the GOGC outside the holds and returns the one before (mu held).
func setBase(p int) int {
	if len(held) == 0 {
		return debug.SetGCPercent(p)
	}
	prev := base
	base = p
	return prev
}

// Low holds GOGC at p or lower until restore is called (once; more calls do nothing). A
// GOGC set in the environment is left as set.
func Low(p int) (restore func()) {
	if _, set := os.LookupEnv("GOGC"); set {
		return func() {}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(held) == 0 {
		base = debug.SetGCPercent(p)
	} else if p < slices.Min(held) {
		debug.SetGCPercent(p)
	}
	held = append(held, p)
	var once sync.Once
	return func() { once.Do(func() { release(p) }) }
}

func release(p int) {
	mu.Lock()
	defer mu.Unlock()
	i := slices.Index(held, p)
	held = slices.Delete(held, i, i+1)
	if len(held) == 0 {
		debug.SetGCPercent(base)
		return
	}
	debug.SetGCPercent(slices.Min(held))
}
