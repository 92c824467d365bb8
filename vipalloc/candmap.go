package vipalloc

import "hash/maphash"

// hashMap holds values by their key (mapKey), keyed by a 64-bit hash of the key computed
// once per visit, so the map hashes and compares integers rather than keys of ~50 bytes
// twice (a miss, then the insert); a key whose hash another key already holds (practically
// never) goes to a map by string. K is how callers hold keys they look up: the expanders
// build theirs in a []byte, compared and looked up without a copy.
type hashMap[V interface {
	comparable
	mapKey() string  // the key (built, for a default name's candidate: see Entry.Key)
	mapKeyIs(K) bool // whether the key is k, built or not
}, K string | []byte] struct {
	byHash map[uint64]V
	more   map[string]V // hash collisions
}

// candMap holds an expander's candidates by key.
type candMap = hashMap[*candidate, []byte]

func newCandMap(n int) candMap { return candMap{byHash: make(map[uint64]*candidate, n)} }

func (c *candidate) mapKey() string { return c.Key() }

func (c *candidate) mapKeyIs(k []byte) bool { return keyIs(&c.Entry, k) }

// keyHash and hostHash are the same hash (maphash hashes bytes and strings alike).
func keyHash(b []byte) uint64  { return maphash.Bytes(hashSeed, b) }
func hostHash(h string) uint64 { return maphash.String(hashSeed, h) }

func (m *hashMap[V, K]) len() int { return len(m.byHash) + len(m.more) }

// get returns the value of key k (hashing to h), or the zero V.
func (m *hashMap[V, K]) get(h uint64, k K) V {
	var none V
	if v := m.byHash[h]; v != none && v.mapKeyIs(k) {
		return v
	}
	if m.more != nil {
		return m.more[string(k)]
	}
	return none
}

// put adds v, whose key (hashing to h) is not in the map.
func (m *hashMap[V, K]) put(h uint64, v V) {
	var none V
	if m.byHash[h] == none {
		m.byHash[h] = v
		return
	}
	if m.more == nil {
		m.more = map[string]V{}
	}
	m.more[v.mapKey()] = v
}

// del removes v.
func (m *hashMap[V, K]) del(v V) {
	h := hostHash(v.mapKey())
	if m.byHash[h] == v {
		delete(m.byHash, h)
		return
	}
	delete(m.more, v.mapKey())
}

// each calls f with every value (in no particular order).
func (m *hashMap[V, K]) each(f func(V)) {
	for _, v := range m.byHash {
		f(v)
	}
	for _, v := range m.more {
		f(v)
	}
}
