package testutil

import "testing"

func TestReserveIsExclusiveUntilTheTestEnds(t *testing.T) {
	const port = 4242
	t.Run("holder", func(t *testing.T) {
		if !reserve(t, port) {
			t.Fatalf("port %d: first reservation refused", port)
		}
		if reserve(t, port) {
			t.Fatalf("port %d reserved twice", port)
		}
	})
	if !reserve(t, port) {
		t.Fatalf("port %d still held after the test that reserved it ended", port)
	}
}

// LowPort gives a port below the kernel's ephemeral range (where port 0 never lands), free
// for TCP and UDP, and never the same one twice within a test.
func TestLowPortIsBelowTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	if low <= 11024 {
		t.Skip("no ephemeral range known here")
	}
	seen := map[int]bool{}
	for range 20 {
		p := LowPort(t, true)
		if p >= low || p < low-10000 {
			t.Fatalf("port %d, want one in [%d, %d)", p, low-10000, low)
		}
		if seen[p] {
			t.Fatalf("port %d given twice", p)
		}
		seen[p] = true
	}
}
