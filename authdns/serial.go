package authdns

import "sync"

// Serials gives each zone its SOA serial: it changes exactly when the zone's content changes
// and never goes back (RFC 1982 arithmetic, as secondaries compare it).
//
// The serial is derived from the store, not from a clock: when the content changes it becomes
// the store revision of the zone's newest input (the lower 32 bits), or the previous serial
// plus one when that would not be ahead of it. Replicas that follow the same store therefore
// give the same serial for the same content.
type Serials struct {
	mu    sync.Mutex
	zones map[string]serialState
}

type serialState struct {
	hash   uint64
	serial uint32
}

// NewSerials returns an empty tracker.
func NewSerials() *Serials { return &Serials{zones: map[string]serialState{}} }

// next returns the serial of the zone at origin with this content hash, built from inputs
// up to store revision rev. A nil tracker gives the revision itself.
func (s *Serials) next(origin string, hash uint64, rev int64) uint32 {
	want := uint32(rev)
	if want == 0 {
		want = 1
	}
	if s == nil {
		return want
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.zones[origin]
	switch {
	case !ok:
	case old.hash == hash:
		return old.serial
	case !serialAfter(want, old.serial):
		want = old.serial + 1
		if want == 0 {
			want = 1
		}
	}
	s.zones[origin] = serialState{hash: hash, serial: want}
	return want
}

// serialAfter reports whether a is ahead of b in serial number arithmetic (RFC 1982).
func serialAfter(a, b uint32) bool {
	return a != b && int32(a-b) > 0
}
