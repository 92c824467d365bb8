package vipalloc

// u32set is a set of non-zero uint32 (the taken addresses of a pool): open addressing with
// linear probing in a pointer-free slice, so it costs the garbage collector nothing to scan
// and one probe sequence per operation. Zero marks an empty slot (address 0 is never usable).
type u32set struct {
	slots []uint32 // power-of-two length, at most 7/8 full
	n     int
	shift uint // 64 - log2(len(slots))
}

func (s *u32set) len() int { return s.n }

// home is k's first slot.
func (s *u32set) home(k uint32) int { return addrHome(k, s.shift) }

// reserve makes room for n elements without growing. The set is only probed while VIPs
// are allocated (never while answering), so it is kept dense: 4.6-9.2 bytes an address
// where half full took 8-16.
func (s *u32set) reserve(n int) {
	size, shift := denseSlotsFor(n)
	if size <= len(s.slots) {
		return
	}
	old := s.slots
	s.slots, s.shift, s.n = make([]uint32, size), shift, 0
	for _, k := range old {
		if k != 0 {
			s.add(k)
		}
	}
}

func (s *u32set) has(k uint32) bool {
	if s.n == 0 {
		return false
	}
	mask := len(s.slots) - 1
	for i := s.home(k); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case k:
			return true
		case 0:
			return false
		}
	}
}

// add inserts k (non-zero) and reports whether it was absent.
func (s *u32set) add(k uint32) bool {
	if 8*(s.n+1) > 7*len(s.slots) {
		s.reserve(s.n + 1)
	}
	mask := len(s.slots) - 1
	for i := s.home(k); ; i = (i + 1) & mask {
		switch s.slots[i] {
		case k:
			return false
		case 0:
			s.slots[i] = k
			s.n++
			return true
		}
	}
}

// remove deletes k, shifting back the elements of its probe run so no tombstone is needed.
func (s *u32set) remove(k uint32) {
	if s.n == 0 {
		return
	}
	mask := len(s.slots) - 1
	i := s.home(k)
	for s.slots[i] != k {
		if s.slots[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	s.n--
	for j := i; ; {
		s.slots[i] = 0
		for {
			j = (j + 1) & mask
			x := s.slots[j]
			if x == 0 {
				return
			}
			// x may fill the hole at i when its home is not cyclically in (i, j].
			if (j-s.home(x))&mask >= (j-i)&mask {
				s.slots[i] = x
				i = j
				break
			}
		}
	}
}
