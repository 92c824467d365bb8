package vipalloc

import (
	"fmt"
	"net/netip"
)

// pool is one IPv4 VIP pool: the usable addresses of a prefix (without its network address,
// its last address when the prefix is /30 or wider, 255.255.255.255 and an excluded
// sub-prefix), and which of them are taken. Pools whose prefixes overlap (the MeshService
// pool lies inside the service pool) share one set of taken addresses (share), so an
// address is never handed out twice; own counts the pool's own.
type pool struct {
	prefix netip.Prefix
	ranges []span // usable addresses, ascending
	size   uint64
	used   *u32set
	own    uint64
}

// share makes p take its addresses from the set of taken addresses of o.
func (p *pool) share(o *pool) { p.used = o.used }

type span struct{ lo, hi uint32 } // inclusive

func newPool(field string, p netip.Prefix, exclude netip.Prefix) (*pool, error) {
	lo := v4u(p.Addr())
	hi := lo | uint32(uint64(1)<<(32-p.Bits())-1)
	spans := []span{{lo, hi}}
	if exclude.IsValid() && exclude.Overlaps(p) && exclude.Bits() > p.Bits() {
		elo := v4u(exclude.Addr())
		ehi := elo | uint32(uint64(1)<<(32-exclude.Bits())-1)
		spans = cut(spans, elo, ehi)
	}
	spans = cut(spans, lo, lo) // the network address
	if p.Bits() <= 30 {
		spans = cut(spans, hi, hi) // the pool's broadcast address
	}
	spans = cut(spans, 0xffffffff, 0xffffffff)
	spans = cut(spans, 0, 0)
	pl := &pool{prefix: p, ranges: spans, used: &u32set{}}
	for _, s := range spans {
		pl.size += uint64(s.hi-s.lo) + 1
	}
	if pl.size == 0 {
		return nil, &ConfigError{Field: field, Value: p.String(), Msg: "leaves no usable address"}
	}
	return pl, nil
}

// cut removes [lo, hi] from spans.
func cut(spans []span, lo, hi uint32) []span {
	var out []span
	for _, s := range spans {
		if hi < s.lo || lo > s.hi {
			out = append(out, s)
			continue
		}
		if s.lo < lo {
			out = append(out, span{s.lo, lo - 1})
		}
		if s.hi > hi {
			out = append(out, span{hi + 1, s.hi})
		}
	}
	return out
}

// at is the i-th usable address (0 <= i < size).
func (p *pool) at(i uint64) uint32 {
	for _, s := range p.ranges {
		n := uint64(s.hi-s.lo) + 1
		if i < n {
			return s.lo + uint32(i)
		}
		i -= n
	}
	panic("vipalloc: pool index out of range") // unreachable: callers reduce i modulo size
}

func (p *pool) contains(a uint32) bool {
	for _, s := range p.ranges {
		if a >= s.lo && a <= s.hi {
			return true
		}
	}
	return false
}

func (p *pool) full() bool { return p.own >= p.size }

// take gives a key hashing to h (hashKey) an address: want if it is usable and free, else
// the first free address probing linearly from h. ok is false when the pool is full.
func (p *pool) take(h uint64, want uint32, haveWant bool) (uint32, bool) {
	if haveWant && p.contains(want) {
		if p.used.add(want) {
			p.own++
			return want, true
		}
	}
	if p.full() {
		return 0, false
	}
	start := h % p.size
	for j := uint64(0); j < p.size; j++ {
		a := p.at((start + j) % p.size)
		if p.used.add(a) {
			p.own++
			return a, true
		}
	}
	return 0, false
}

// release frees a (its holder lets go of it).
func (p *pool) release(a uint32) {
	if p.used.has(a) {
		p.own--
	}
	p.used.remove(a)
}

func (p *pool) exhausted() string {
	return fmt.Sprintf("VIP pool %s is exhausted (%d addresses, all taken)", p.prefix, p.size)
}

// hashKey is 64-bit FNV-1a: stable across processes and versions, so a fresh allocator
// picks the same VIPs for the same names.
func hashKey[K string | []byte](s K) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
