package vipalloc

import (
	"math/bits"
	"unsafe"
)

// hostMap holds the states of one shard's hostnames, found by name. The states live in
// chunks of hostChunk (their addresses never change, so a *hostState stays valid while its
// hostname is known, and once dropped until the next round: see del); the index is an
// open-addressing table with linear probing of 4-byte slots at most 7/8 full, each holding
// a state's position+1 in its low posBits bits and, above them, a tag of the name's hash,
// so that a probe compares a name practically only for the name it looks for. Where a Go
// map from hash to state took ~23 bytes a hostname, this takes 4.6-9.2 bytes of index.
type hostMap struct {
	chunks  [][]hostState
	used    int      // positions handed out (live or free)
	free    []uint32 // positions of reclaimed states, reused first
	dying   []uint32 // positions of states dropped since the last reclaim
	dropped []uint64 // a bit per position: set for a dropped state (dying or free)
	slots   []uint32 // 0: empty; tomb: a dropped state's slot; else tag | pos+1
	shift   uint     // takes a 64-bit hash to a slot (the slot count is 1<<(64-shift))
	posBits uint     // bits of a slot that hold pos+1
	n       int      // live states
	tombs   int      // tomb slots
}

// hostChunk is how many states a chunk holds (6 KiB).
const hostChunk = 256

// tomb marks a slot whose state was dropped: probes go on past it, inserts may take it. Its
// position part is 0 (no state), which no live slot's is.
const tomb uint32 = 1 << 31

// newHostMap returns a map with room for n hostnames before its index grows.
func newHostMap(n int) hostMap {
	var m hostMap
	m.resize(n)
	return m
}

// resize makes an empty index for at least n states (at most 7/8 full), never too small for
// the positions handed out, and puts the live states in it.
func (m *hostMap) resize(n int) {
	size, shift := denseSlotsFor(max(n, m.used)) // a position must fit a slot
	m.slots, m.shift = make([]uint32, size), shift
	m.posBits = uint(bits.Len(uint(size)))
	m.tombs = 0
	mask := size - 1
	for pos := 0; pos < m.used; pos++ {
		if m.isDropped(pos) {
			continue
		}
		h := hostHash(m.at(pos).name())
		i := int(h >> m.shift)
		for m.slots[i] != 0 {
			i = (i + 1) & mask
		}
		m.slots[i] = m.slot(h, pos)
	}
}

func (m *hostMap) slot(h uint64, pos int) uint32 { return uint32(h)<<m.posBits | uint32(pos+1) }
func (m *hostMap) tagOf(h uint64) uint32         { return uint32(h) << m.posBits }
func (m *hostMap) pos(s uint32) int              { return int(s&(1<<m.posBits-1)) - 1 }
func (m *hostMap) tag(s uint32) uint32           { return s &^ (1<<m.posBits - 1) }

// isDropped reports whether the state at pos was dropped.
func (m *hostMap) isDropped(pos int) bool { return m.dropped[pos/64]&(1<<(pos%64)) != 0 }

// at is the state at position pos.
func (m *hostMap) at(pos int) *hostState { return &m.chunks[pos/hostChunk][pos%hostChunk] }

func (m *hostMap) len() int { return m.n }

// get returns the state of hostname name (hashing to h), or nil.
func (m *hostMap) get(h uint64, name string) *hostState { return findHost(m, h, name) }

// findHost is get for a name held in a string or a []byte (compared without a copy).
func findHost[K string | []byte](m *hostMap, h uint64, name K) *hostState {
	if len(m.slots) == 0 {
		return nil
	}
	tag, mask := m.tagOf(h), len(m.slots)-1
	for i := int(h >> m.shift); ; i = (i + 1) & mask {
		s := m.slots[i]
		if s == 0 {
			return nil
		}
		if s != tomb && m.tag(s) == tag {
			if hs := m.at(m.pos(s)); hs.name() == string(name) {
				return hs
			}
		}
	}
}

// add makes the state of hostname c.Hostname (hashing to h, not in the map) with c, and
// returns it.
func (m *hostMap) add(h uint64, c *candidate) *hostState {
	if (m.n+m.tombs+1)*8 > len(m.slots)*7 {
		m.resize(m.n + 1)
	}
	var pos int
	if k := len(m.free); k > 0 {
		pos = int(m.free[k-1])
		m.free = m.free[:k-1]
	} else {
		if m.used == len(m.chunks)*hostChunk {
			m.chunks = append(m.chunks, make([]hostState, hostChunk))
			m.dropped = append(m.dropped, make([]uint64, hostChunk/64)...)
		}
		pos = m.used
		m.used++
	}
	m.dropped[pos/64] &^= 1 << (pos % 64)
	hs := m.at(pos)
	*hs = hostState{p: unsafe.Pointer(c), bits: hsCand}
	mask := len(m.slots) - 1
	i := int(h >> m.shift)
	for m.slots[i] != 0 && m.slots[i] != tomb {
		i = (i + 1) & mask
	}
	if m.slots[i] == tomb {
		m.tombs--
	}
	m.slots[i] = m.slot(h, pos)
	m.n++
	return hs
}

// del drops hs, the state of a hostname hashing to h: its slot becomes a tomb; the state
// keeps what it holds, for the lists of the round that dropped it, until reclaim frees its
// place.
func (m *hostMap) del(h uint64, hs *hostState) {
	tag, mask := m.tagOf(h), len(m.slots)-1
	for i := int(h >> m.shift); m.slots[i] != 0; i = (i + 1) & mask {
		s := m.slots[i]
		if s == tomb || m.tag(s) != tag {
			continue
		}
		if pos := m.pos(s); m.at(pos) == hs {
			m.slots[i] = tomb
			m.tombs++
			m.n--
			m.dropped[pos/64] |= 1 << (pos % 64)
			m.dying = append(m.dying, uint32(pos))
			return
		}
	}
}

// reclaim frees the places of the states dropped since its last call (called between
// rounds, when no list holds them any more).
func (m *hostMap) reclaim() {
	for _, pos := range m.dying {
		*m.at(int(pos)) = hostState{}
	}
	m.free = append(m.free, m.dying...)
	m.dying = m.dying[:0]
}

// each calls f with every state (in no particular order).
func (m *hostMap) each(f func(*hostState)) {
	for pos := 0; pos < m.used; pos++ {
		if !m.isDropped(pos) {
			f(m.at(pos))
		}
	}
}
