// Package memprof switches Go's heap profiling off from the first moment of the process
// (import it, for its init, from a command's main package) and back on for an agent that
// serves its profiles.
//
// The runtime samples an allocation every 512 KiB on average, from the first one, into a
// bucket table of its own (~1.4 MiB, touched at a page per bucket) that it never returns:
// paid by every agent, read only by the few that serve /debug/pprof/. The agent runs
// beside every workload, so the default is off.
package memprof

import "runtime"

// defaultRate is Go's default MemProfileRate.
const defaultRate = 512 * 1024

func init() {
	// Dependencies first, then packages by import path: this package (importing only
	// runtime) initialises before the large ones (protobuf descriptors, CoreDNS) allocate.
	runtime.MemProfileRate = 0
}

// Enable turns heap profiling on at Go's default rate: the profile then shows what is
// allocated from this call on (a model loaded after it, with everything it keeps).
func Enable() {
	if runtime.MemProfileRate == 0 {
		runtime.MemProfileRate = defaultRate
	}
}
