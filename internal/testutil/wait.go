package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond every 50 ms until it holds and returns how long that took; the test
// fails (naming what) when it has not held within the bound.
func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}
