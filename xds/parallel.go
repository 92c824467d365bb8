package xds

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// inChunks calls do(i) for every i in [0, n) on up to GOMAXPROCS goroutines (this one among
// them), each taking chunk consecutive indexes at a time so that neighbours mostly stay on
// one worker. worker is called once per worker and returns that worker's do, so that a
// worker can keep state of its own (a cache) across its indexes.
func inChunks(n, chunk int, worker func() (do func(i int))) {
	var pos atomic.Int64
	work := func() {
		do := worker()
		for {
			start := int(pos.Add(int64(chunk))) - chunk
			if start >= n {
				return
			}
			for i := start; i < min(start+chunk, n); i++ {
				do(i)
			}
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < min(runtime.GOMAXPROCS(0), (n+chunk-1)/chunk); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}
