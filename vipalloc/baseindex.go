package vipalloc

import (
	"math/bits"
	"net/netip"
)

// baseIndex is the full index of a table: its available entries by hostname and by IPv4
// VIP, as positions in the entry list it was built from. Both are open-addressing tables
// with linear probing in pointer-free []uint64 slices at most half full: building one costs
// a hash and a probe per entry, and the garbage collector never scans them.
type baseIndex struct {
	all []*Entry
	// names slots: the low 32 bits of the hostname's hash << 32 | position+1 (0: empty).
	names []uint64
	// addrs slots: VIP << 32 | position+1 (0: empty).
	addrs []uint64
	shift uint // both tables have the same size: slotsFor(available entries)
	count int  // available entries (indexed names)
	// other6 holds the IPv6 addresses of hand-built tables (no twin prefix).
	other6 map[netip.Addr]*Entry
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

// addrHome is the first slot of address v in a table of 64-shift bits (Fibonacci hashing:
// consecutive addresses spread out). The pool's u32set probes from it too.
func addrHome(v uint32, shift uint) int { return int((uint64(v) * 0x9e3779b97f4a7c15) >> shift) }

// buildNames indexes the available entries of all by hostname (each hostname once) in
// size slots (b.shift set).
func (b *baseIndex) buildNames(size int) {
	b.names = make([]uint64, size)
	mask := size - 1
	for pos, e := range b.all {
		if e.Status != Available {
			continue
		}
		h := hostHash(e.Hostname)
		slot := h<<32 | uint64(pos+1)
		for i := int(h >> b.shift); ; i = (i + 1) & mask {
			s := b.names[i]
			if s == 0 {
				b.names[i] = slot
				b.count++
				break
			}
			if uint32(s>>32) == uint32(h) && b.all[uint32(s)-1].Hostname == e.Hostname {
				b.names[i] = slot // the last one wins, like a map assignment
				break
			}
		}
	}
}

// buildAddrs indexes the available entries of all by IPv4 VIP; a VIP shared by several
// hostnames answers with the first of them.
func (b *baseIndex) buildAddrs(size int) {
	b.addrs = make([]uint64, size)
	mask := size - 1
	for pos, e := range b.all {
		if e.Status != Available || e.flags&hasV4 == 0 {
			continue
		}
		v := e.v4
		for i := addrHome(v, b.shift); ; i = (i + 1) & mask {
			s := b.addrs[i]
			if s == 0 {
				b.addrs[i] = uint64(v)<<32 | uint64(pos+1)
				break
			}
			if uint32(s>>32) == v {
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
	mask := len(b.names) - 1
	for i := int(h >> b.shift); ; i = (i + 1) & mask {
		s := b.names[i]
		if s == 0 {
			return nil, false
		}
		if uint32(s>>32) == uint32(h) {
			if e := b.all[uint32(s)-1]; e.Hostname == name {
				return e, true
			}
		}
	}
}

func (b *baseIndex) addr(v uint32) (*Entry, bool) {
	if len(b.addrs) == 0 {
		return nil, false
	}
	mask := len(b.addrs) - 1
	for i := addrHome(v, b.shift); ; i = (i + 1) & mask {
		s := b.addrs[i]
		if s == 0 {
			return nil, false
		}
		if uint32(s>>32) == v {
			return b.all[uint32(s)-1], true
		}
	}
}
