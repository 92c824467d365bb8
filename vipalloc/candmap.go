package vipalloc

import "hash/maphash"

// candMap holds an expander's candidates by key. It is keyed by a 64-bit hash of the key,
// computed once per visit, so the map hashes and compares integers rather than keys of
// ~50 bytes twice (a miss, then the insert); a key whose hash another key already holds
// (practically never) goes to a map by string.
type candMap struct {
	byHash map[uint64]*candidate
	more   map[string]*candidate // hash collisions
}

func newCandMap(n int) candMap { return candMap{byHash: make(map[uint64]*candidate, n)} }

func keyHash(b []byte) uint64 { return maphash.Bytes(hashSeed, b) }

func (m *candMap) len() int { return len(m.byHash) + len(m.more) }

// get returns the candidate of key b (h = keyHash(b)), or nil.
func (m *candMap) get(h uint64, b []byte) *candidate {
	if c := m.byHash[h]; c != nil && c.Key == string(b) {
		return c
	}
	if m.more != nil {
		return m.more[string(b)]
	}
	return nil
}

// put adds c, whose key (hashing to h) is not in the map.
func (m *candMap) put(h uint64, c *candidate) {
	if m.byHash[h] == nil {
		m.byHash[h] = c
		return
	}
	if m.more == nil {
		m.more = map[string]*candidate{}
	}
	m.more[c.Key] = c
}

// del removes c.
func (m *candMap) del(c *candidate) {
	h := maphash.String(hashSeed, c.Key)
	if m.byHash[h] == c {
		delete(m.byHash, h)
		return
	}
	delete(m.more, c.Key)
}

// each calls f with every candidate (in no particular order).
func (m *candMap) each(f func(*candidate)) {
	for _, c := range m.byHash {
		f(c)
	}
	for _, c := range m.more {
		f(c)
	}
}

// hostMap holds hostnames' states, keyed like candMap by a 64-bit hash of the hostname
// (hostHash, which also picks the shard), falling back to a map by string on a collision.
type hostMap struct {
	byHash map[uint64]*hostState
	more   map[string]*hostState // hash collisions
}

func newHostMap(n int) hostMap { return hostMap{byHash: make(map[uint64]*hostState, n)} }

func hostHash(h string) uint64 { return maphash.String(hashSeed, h) }

func (m *hostMap) len() int { return len(m.byHash) + len(m.more) }

// get returns the state of hostname host (h = hostHash(host)), or nil.
func (m *hostMap) get(h uint64, host string) *hostState {
	if hs := m.byHash[h]; hs != nil && hs.host == host {
		return hs
	}
	if m.more != nil {
		return m.more[host]
	}
	return nil
}

// put adds hs, whose hostname (hashing to h) is not in the map.
func (m *hostMap) put(h uint64, hs *hostState) {
	if m.byHash[h] == nil {
		m.byHash[h] = hs
		return
	}
	if m.more == nil {
		m.more = map[string]*hostState{}
	}
	m.more[hs.host] = hs
}

// del removes hs.
func (m *hostMap) del(hs *hostState) {
	h := hostHash(hs.host)
	if m.byHash[h] == hs {
		delete(m.byHash, h)
		return
	}
	delete(m.more, hs.host)
}

// each calls f with every hostname's state (in no particular order).
func (m *hostMap) each(f func(*hostState)) {
	for _, hs := range m.byHash {
		f(hs)
	}
	for _, hs := range m.more {
		f(hs)
	}
}
