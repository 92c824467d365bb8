package testutil

import (
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test after within; it returns how long
// that took.
func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}
