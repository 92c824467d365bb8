package authdns

import "sync"

// SerialSource gives each zone of a build its SOA serial (Build asks it once per zone).
type SerialSource interface {
	// Serial is the serial of the zone at origin whose content, serial aside, hashes to
	// hash (Zone.Hash), built from store inputs up to revision rev (Router.Revision,
	// UserName.Revision: the newest).
	Serial(origin string, hash uint64, rev int64) uint32
}

// NextSerial is the serial a zone's content gets when it differs from the content that had
// prev (0: none): rev, the store revision of the zone's newest input (its lower 32 bits),
// when that is ahead of prev in serial number arithmetic (RFC 1982, as secondaries compare
// it), and prev+1 otherwise (a change of readiness alone, which no revision dates). Never 0.
func NextSerial(prev uint32, rev int64) uint32 {
	want := uint32(rev)
	if want == 0 {
		want = 1
	}
	if prev == 0 || SerialAfter(want, prev) {
		return want
	}
	if want = prev + 1; want == 0 {
		want = 1
	}
	return want
}

// Serials is a SerialSource kept in memory, for one process: a zone's serial changes exactly
// when its content changes (NextSerial) and never goes back while the process runs. The
// control plane keeps its serials in the store instead, so that they are the same on every
// replica and after a restart (cp/shardzones).
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

// Serial implements SerialSource. A nil tracker gives NextSerial(0, rev).
func (s *Serials) Serial(origin string, hash uint64, rev int64) uint32 {
	if s == nil {
		return NextSerial(0, rev)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, ok := s.zones[origin]
	if ok && old.hash == hash {
		return old.serial
	}
	serial := NextSerial(old.serial, rev)
	s.zones[origin] = serialState{hash: hash, serial: serial}
	return serial
}

// SerialAfter reports whether a is ahead of b in serial number arithmetic (RFC 1982), as
// secondaries compare serials.
func SerialAfter(a, b uint32) bool { return a != b && int32(a-b) > 0 }
