// Package testutil holds what the tests of several packages share.
package testutil

import (
	"bytes"
	"runtime"
	"strings"
	"sync"
)

// LockedBuffer is a bytes.Buffer safe for a process writing its logs into it while a test
// reads them.
type LockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// LineWith is the first line of logs containing s ("" when none).
func LineWith(logs, s string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// HeapAllocated is the heap allocated while f runs (all goroutines: run nothing else).
func HeapAllocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
