package etcdtest

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
