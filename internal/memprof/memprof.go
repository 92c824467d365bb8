// Package memprof switches Go's heap profiling off from the first moment of the process
// (import it, for its init, from a command's main package) and back on for an agent that
// serves its profiles.
//
// The runtime samples an allocation every 512 KiB on average, from the first one, into a
// bucket table of its own (~1.4 MiB, touched at a page per bucket) that it never returns:
// paid by every agent, read only by the few that serve /debug/pprof/. The agent runs
// beside every workload, so the default is off. A rate asked for with Go's own setting,
// GODEBUG=memprofilerate=N (N=4096 gives every object's size to the byte), is left as set.
package memprof

import (
	"os"
	"runtime"
	"strings"
)

// defaultRate is Go's default MemProfileRate.
const defaultRate = 512 * 1024

func init() {
	// Dependencies first, then packages by import path: this package (importing only the
	// standard library's small packages) initialises before the large ones (protobuf
	// descriptors, CoreDNS) allocate.
	if !rateSet(os.Getenv("GODEBUG")) {
		runtime.MemProfileRate = 0
	}
}

// rateSet reports whether a GODEBUG value sets memprofilerate.
func rateSet(godebug string) bool {
	for kv := range strings.SplitSeq(godebug, ",") {
		if k, _, _ := strings.Cut(kv, "="); strings.TrimSpace(k) == "memprofilerate" {
			return true
		}
	}
	return false
}

// Enable turns heap profiling on at Go's default rate (or keeps the rate GODEBUG set): the
// profile then shows what is allocated from this call on (a model loaded after it, with
// everything it keeps).
func Enable() {
	if runtime.MemProfileRate == 0 {
		runtime.MemProfileRate = defaultRate
	}
}
