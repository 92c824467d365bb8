package vipalloc

import (
	"math/bits"
	"net/netip"
)

// baseIndex is the full index of a table: its available entries by hostname and by IPv4
// VIP, as positions in the entry list it was built from. Both are open-addressing tables
// with linear probing in pointer-free []uint32 slices: building one costs a hash and a probe
// per entry, and the garbage collector never scans them. The names' is at most half full,
// so that a question for a name that is not there (a search domain's: most questions) ends
// after ~2 probes; the VIPs' (PTR questions, rare) at most 7/8 full, half its size.
//
// A slot holds position+1 in its low posBits bits (0: empty) and, in the bits above, a tag:
// bits of the key's hash the slot's place does not already tell. A probe compares tags, so
// it reads an entry (and compares a name) practically only for the key it looks for; four
// bytes a slot rather than eight (the hash or VIP in full) halves what a table costs.
type baseIndex struct {
	all     []*Entry
	names   []uint32
	addrs   []uint32
	shift   uint // the names' table size: slotsFor(available entries)
	shift4  uint // the VIPs' table size: denseSlotsFor(available entries)
	posBits uint // bits.Len(len(all)): the bits of a slot that hold position+1
	count   int  // available entries (indexed names)
	// other6 holds the IPv6 addresses of hand-built tables (no twin prefix).
	other6 map[netip.Addr]*Entry
}

// slot is the slot of position pos for a key whose hash has low 32 bits h.
func (b *baseIndex) slot(h uint32, pos int) uint32 { return b.tagOf(h) | uint32(pos+1) }

// tagOf is the tag part of a slot for a key whose hash has low 32 bits h.
func (b *baseIndex) tagOf(h uint32) uint32 { return h << b.posBits }

// pos is the position a (non-empty) slot holds.
func (b *baseIndex) pos(s uint32) int { return int(s&(1<<b.posBits-1)) - 1 }

// tag is the tag part of a slot.
func (b *baseIndex) tag(s uint32) uint32 { return s &^ (1<<b.posBits - 1) }

// addrTagHash is the hash a VIP's tag is taken from (both halves of the product addrHome
// takes its top bits from).
func addrTagHash(v uint32) uint32 {
	p := uint64(v) * 0x9e3779b97f4a7c15
	return uint32(p ^ p>>32)
}

// slotsFor returns a power-of-two slot count at least twice n, and the shift that takes a
// 64-bit hash to a slot.
func slotsFor(n int) (int, uint) {
	size := 16
	for size < 2*n {
		size *= 2
	}
	return size, uint(64 - bits.TrailingZeros(uint(size)))
}

// denseSlotsFor returns a power-of-two slot count at most 7/8 of which n fill, and the
// shift that takes a 64-bit hash to a slot: for tables probed while VIPs are allocated or
// for PTR questions, where a longer probe for a missing key costs nothing that matters.
func denseSlotsFor(n int) (int, uint) {
	size := 16
	for size*7/8 < n {
		size *= 2
	}
	return size, uint(64 - bits.TrailingZeros(uint(size)))
}

// addrHome is the first slot of address v in a table of 64-shift bits (Fibonacci hashing:
// consecutive addresses spread out). The pool's u32set probes from it too.
func addrHome(v uint32, shift uint) int { return int((uint64(v) * 0x9e3779b97f4a7c15) >> shift) }

// buildNames indexes the available entries of all by hostname (each hostname once) in
// size slots (b.shift and b.posBits set).
func (b *baseIndex) buildNames(size int) {
	b.names = make([]uint32, size)
	mask := size - 1
	for pos, e := range b.all {
		if e.Status != Available {
			continue
		}
		host := e.host()
		h := host.hash()
		slot := b.slot(uint32(h), pos)
		for i := int(h >> b.shift); ; i = (i + 1) & mask {
			s := b.names[i]
			if s == 0 {
				b.names[i] = slot
				b.count++
				break
			}
			if b.tag(s) == b.tagOf(uint32(h)) && b.all[b.pos(s)].host().equal(host) {
				b.names[i] = slot // the last one wins, like a map assignment
				break
			}
		}
	}
}

// buildAddrs indexes the available entries of all by IPv4 VIP in size slots (b.shift4 and
// b.posBits set); a VIP shared by several hostnames answers with the first of them.
func (b *baseIndex) buildAddrs(size int) {
	b.addrs = make([]uint32, size)
	mask := size - 1
	for pos, e := range b.all {
		if e.Status != Available || e.flags&hasV4 == 0 {
			continue
		}
		v := e.v4
		tag := b.tagOf(addrTagHash(v))
		for i := addrHome(v, b.shift4); ; i = (i + 1) & mask {
			s := b.addrs[i]
			if s == 0 {
				b.addrs[i] = tag | uint32(pos+1)
				break
			}
			if b.tag(s) == tag && b.all[b.pos(s)].v4 == v {
				break
			}
		}
	}
}

func (b *baseIndex) name(name string) (*Entry, bool) {
	if len(b.names) == 0 {
		return nil, false
	}
	h := hostHash(name)
	tag := b.tagOf(uint32(h))
	mask := len(b.names) - 1
	for i := int(h >> b.shift); ; i = (i + 1) & mask {
		s := b.names[i]
		if s == 0 {
			return nil, false
		}
		if b.tag(s) == tag {
			if e := b.all[b.pos(s)]; nameIs(e.host(), name) {
				return e, true
			}
		}
	}
}

func (b *baseIndex) addr(v uint32) (*Entry, bool) {
	if len(b.addrs) == 0 {
		return nil, false
	}
	tag := b.tagOf(addrTagHash(v))
	mask := len(b.addrs) - 1
	for i := addrHome(v, b.shift4); ; i = (i + 1) & mask {
		s := b.addrs[i]
		if s == 0 {
			return nil, false
		}
		if b.tag(s) == tag {
			if e := b.all[b.pos(s)]; e.v4 == v && e.flags&hasV4 != 0 {
				return e, true
			}
		}
	}
}
