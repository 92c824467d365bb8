package mesh

import (
	"maps"
	"slices"
	"unsafe"

	"github.com/kumadp/kuma-dp/tagset"
)

// strArena holds the strings of the resources decoded from one file. A parsed document's
// keys and values are slices of the document's text, so a resource that kept them would
// keep the whole text alive (a Dataplane of ~150 bytes of YAML keeps all of it); the
// decoder copies each string it stores into large shared blocks instead, and stores one copy of the strings that repeat (tag keys, mesh names, states):
// 100,000 decoded Dataplanes then hold their names, addresses and tags in a few MiB.
//
// Strings handed out are never written again (blocks only grow at their end), so they are
// ordinary immutable strings; a block lives as long as any string in it, which is as long
// as the file's resources.
type strArena struct {
	block  []byte
	common map[string]string
	// values holds the one copy of each tag value seen lately (see value): at most
	// maxValues, emptied when full.
	values map[string]string
	first  int // the first block's size: arenaFirstBlock, or less for a shorter text
	// text is the length of the text the strings come from (0: unknown), rest how much of
	// it is still to be decoded (see reading), used the bytes put in blocks so far: a new
	// block is sized to what the rest will likely need (see blockSize).
	text, rest, used int
	// alone is set when the text is one resource (see liveSet and settle)
	alone bool
	// last is the last string put, prev the one before: a string that begins another of a
	// resource (a tag value "backend" after the name "backend-1", as universal
	// dataplanes are often named after their service) is a part of its bytes, and one
	// that the last string begins ("backend-1" after "backend") extends it in place.
	last, prev string
}

// A file's first block of copied strings holds arenaFirstBlock bytes (or a third of the
// file's size when smaller: the keys, indentation and punctuation of a text are never
// copied, so its strings seldom fill more), each next one twice the last, up to
// arenaBlock: a file of one resource (a directory of one file per resource is common, a
// ConfigMap's keys for instance) holds a few dozen bytes of blocks, not 32 KiB nor its
// whole size, and a file of 100,000 dataplanes gets 32 KiB blocks after a few small ones.
// A text whose strings do fill more than a third gets a second block of two thirds: about
// its size in all, as one block of its size would be.
const (
	arenaFirstBlock = 512
	arenaBlock      = 32 << 10
)

// newStrArena returns an arena for the strings of a text of textLen bytes (0: unknown): the
// strings copied from a text are at most as long as it.
func newStrArena(textLen int) *strArena {
	first := arenaFirstBlock
	if textLen > 0 {
		first = min(max(textLen/3, 64), arenaFirstBlock)
	}
	return &strArena{common: make(map[string]string, 16), first: first, text: textLen, rest: textLen}
}

// reading tells the arena that the strings still to come are those of the last rest bytes
// of its text.
func (a *strArena) reading(rest int) {
	if a != nil {
		a.rest = rest
	}
}

// blockSize is the size of the next block: twice the last (from a.first) up to arenaBlock,
// and no more than the rest of the text will likely need - the bytes put so far per byte
// of text read, over the rest, and an eighth more - so that the last block of a text (a
// file, or a piece of one) is not a 32 KiB block a few KiB of strings fill: a piece of a
// Kubernetes inventory (~1 MB, 1,100 dataplanes, ~37 KiB of strings) held ~27 KiB of
// empty blocks.
func (a *strArena) blockSize() int {
	size := min(max(2*cap(a.block), a.first), arenaBlock)
	if read := a.text - a.rest; a.text > 0 && read > 0 && a.used > 0 {
		need := int(int64(a.used) * int64(a.rest) / int64(read))
		size = min(size, max(need+need/8, 64))
	}
	return size
}

// fit sizes the first block of a small text's arena (a file of one resource, a resource
// from the control plane) to the strings of its first document, n as parsed: the bytes of
// its string scalars, when fewer than a third of the text. Most of a Kubernetes
// dataplane's text is keys and indentation, and its tag keys are not copied (tagKeys): a
// third of its ~830 bytes was a 288-byte block for ~110 bytes of strings.
//
// The values of a tag set a replica decoded alone takes from liveSets are not copied (see
// liveSet), nor counted.
func (a *strArena) fit(n any) {
	if a == nil || a.block != nil || a.first >= arenaFirstBlock {
		return
	}
	size := scalarBytes(n)
	if a.alone {
		size -= liveValueBytes(n)
	}
	a.first = min(a.first, max(size, 16))
}

// liveValueBytes is the length of the values of the tag sets of a parsed node (mappings
// under a "tags" key) that liveSets holds.
func liveValueBytes(n any) int {
	t := 0
	switch n := n.(type) {
	case map[string]any:
		for k, e := range n {
			if m, ok := e.(map[string]any); ok && k == "tags" {
				t += liveSetValueBytes(m)
			} else {
				t += liveValueBytes(e)
			}
		}
	case []any:
		for _, e := range n {
			t += liveValueBytes(e)
		}
	}
	return t
}

// liveSetValueBytes is the length of the values of m, a parsed tag set, when liveSets holds
// it (0 otherwise).
func liveSetValueBytes(m map[string]any) int {
	var arr [16]Tag
	tags, size := Tags(arr[:0]), 0
	for k, e := range m {
		v, ok := e.(string)
		if !ok {
			return 0 // decoded another way
		}
		tags = append(tags, Tag{Key: k, Value: v})
		size += len(v)
	}
	if liveSets.lookup(tagset.Sorted(tags)) == nil {
		return 0
	}
	return size
}

// scalarBytes is the length of the string scalars of a parsed node (numbers and booleans
// are decoded as such: a tag value written as one is rare).
func scalarBytes(n any) int {
	switch n := n.(type) {
	case string:
		return len(n)
	case map[string]any:
		t := 0
		for _, e := range n {
			t += scalarBytes(e)
		}
		return t
	case []any:
		t := 0
		for _, e := range n {
			t += scalarBytes(e)
		}
		return t
	}
	return 0
}

// copy returns s copied into the arena, or the arena's shared copy when s is one of the
// strings it already shares.
func (a *strArena) copy(s string) string {
	if a == nil || s == "" {
		return s
	}
	if c, ok := a.common[s]; ok {
		return c
	}
	return a.put(s)
}

// share returns the arena's one copy of s (a tag key, a mesh name): later copies of the
// same text return it too.
func (a *strArena) share(s string) string {
	if a == nil || s == "" {
		return s
	}
	if c, ok := a.common[s]; ok {
		return c
	}
	c := s
	if !a.holds(s) { // a string copied already (a mesh's name, shared once decoded) is kept
		c = a.put(s)
	}
	a.common[c] = c
	return c
}

// holds reports whether s is in the arena's current block.
func (a *strArena) holds(s string) bool {
	if len(a.block) == 0 {
		return false
	}
	p, start := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(&a.block[0]))
	return p >= start && p+uintptr(len(s)) <= start+uintptr(len(a.block))
}

// maxTagKey is the longest tag key tagKeys holds: a Kubernetes label key's longest (a
// 253-byte prefix, a slash and a 63-byte name); the table holds at most ~320 KB.
const maxTagKey = 253 + 1 + 63

// key returns the process's one copy of a tag key (tagKeys), or the arena's when that table
// is full or the key longer than maxTagKey.
func (a *strArena) key(k string) string {
	if a == nil || k == "" {
		return k
	}
	if c, ok := a.common[k]; ok {
		return c
	}
	c, ok := "", false
	if len(k) <= maxTagKey {
		c, ok = tagKeys.get(k)
	}
	if !ok {
		return a.share(k)
	}
	a.common[c] = c
	return c
}

// liveSet returns the set of liveSets equal to t (whose values are not copied yet) when the
// text is one resource, nil otherwise: a replica decoded alone takes its workload's set
// without copying its values, which the set it takes has already.
func (a *strArena) liveSet(t Tags) Tags {
	if a == nil || !a.alone {
		return nil
	}
	return liveSets.lookup(t)
}

// maxValues is the number of distinct tag values an arena remembers: a Kubernetes mesh's
// pods are listed by name, so a workload's pods follow each other and the values they
// repeat are found again long before the map is emptied; and a file of 100,000 dataplanes,
// each with a value of its own, does not hold a map of them all while it is decoded.
const maxValues = 1024

// value returns the arena's one copy of a tag value seen lately, or s copied (and
// remembered): most values of a Kubernetes mesh repeat on every pod of a workload (its app,
// version, pod-template-hash, service) or of the mesh (namespace, zone, protocol, port).
func (a *strArena) value(s string) string {
	if a == nil || s == "" {
		return s
	}
	if c, ok := a.values[s]; ok {
		return c
	}
	if a.values == nil {
		a.values = make(map[string]string, 64)
	} else if len(a.values) >= maxValues {
		clear(a.values)
	}
	c := a.copy(s)
	a.values[c] = c
	return c
}

func (a *strArena) put(s string) string {
	if len(s) > arenaBlock/4 {
		return string([]byte(s)) // large: a copy of its own
	}
	for _, r := range [2]string{a.last, a.prev} {
		if len(s) <= len(r) && r[:len(s)] == s {
			return r[:len(s)]
		}
	}
	if l := a.last; l != "" && len(s) > len(l) && s[:len(l)] == l && len(a.block)+len(s)-len(l) <= cap(a.block) &&
		len(a.block) >= len(l) && unsafe.StringData(l) == &a.block[len(a.block)-len(l)] {
		// the last string ends the block: s is it and the rest of s appended
		a.used += len(s) - len(l)
		a.block = append(a.block, s[len(l):]...)
		return a.remember(unsafe.String(&a.block[len(a.block)-len(s)], len(s)))
	}
	if len(a.block)+len(s) > cap(a.block) {
		a.block = make([]byte, 0, max(a.blockSize(), len(s)))
	}
	a.used += len(s)
	a.block = append(a.block, s...)
	return a.remember(unsafe.String(&a.block[len(a.block)-len(s)], len(s)))
}

func (a *strArena) remember(s string) string {
	a.last, a.prev = s, a.last
	return s
}

// settle replaces each decoded Dataplane of rs by a copy made now, after the whole file (or
// piece of one) is decoded. Decoding allocates a resource's parts between the parsed
// document's maps and lists, which are garbage a moment later; a copy made once they are
// all allocated sits in memory of its own, so the memory of the parse and of the first
// copies is freed whole and goes back to the OS, instead of staying in use as holes
// between live objects (about 290 bytes of every Dataplane's memory otherwise).
//
// Inbounds with the same tags (the replicas of a service) share one map: a map holding a
// few tags costs ~340 bytes however few they are. Tags are never modified once decoded.
//
// A Dataplane decoded alone (alone: a text of one resource, from the control plane a
// resource at a time, or a file per dataplane) shares its Kubernetes-sized sets with the
// other dataplanes decoded alone that hold the same (liveSets).
func settle(rs []Resource, alone bool) { settleWith(rs, &tagSets{live: alone}) }

// Settle is what Decode does to the resources of a file once they are decoded, for
// resources read back another way (the agent's decode cache, where each string is an
// object of its own): each Dataplane is replaced by a copy made now, whose strings are
// copied into shared blocks (tag keys and mesh names once) and whose inbounds with the
// same tags share one map.
func Settle(rs []Resource) { NewSettler().Settle(rs) }

// A Settler settles the resources of several files read back together (the decode cache's
// entry for all the small files) into blocks they share: settled apart, each file of one
// dataplane would hold a block of its own (20,000 of them: 10 MB).
type Settler struct{ strs *strArena }

// NewSettler returns a Settler with no blocks yet.
func NewSettler() *Settler { return &Settler{strs: newStrArena(0)} }

// Settle is the package's Settle, into the Settler's blocks.
func (s *Settler) Settle(rs []Resource) { settleIn(rs, s.strs) }

// settleIn is settle, copying the Dataplanes' strings into strs too when it is not nil.
func settleIn(rs []Resource, strs *strArena) { settleWith(rs, &tagSets{strs: strs}) }

// settleWith is settleIn, the inbounds' sets shared through sets.
func settleWith(rs []Resource, sets *tagSets) {
	strs := sets.strs
	for i, r := range rs {
		dp, ok := r.(*Dataplane)
		if !ok {
			continue
		}
		c := copyDataplane(dp)
		n := &c.Networking
		if strs != nil {
			c.Mesh, c.Name = strs.share(c.Mesh), strs.copy(c.Name)
			n.Address = strs.copy(n.Address)
		}
		for j := range n.Inbound {
			in := &n.Inbound[j]
			in.Tags = sets.share(in.Tags)
			if in.InboundExtra != nil {
				x := *in.InboundExtra
				if strs != nil {
					x.Address, x.ServiceAddress, x.State = strs.copy(x.Address), strs.copy(x.ServiceAddress), strs.share(x.State)
				}
				x.Health = sharedHealth(x.Health)
				in.InboundExtra = sharedInboundExtra(&x)
			}
		}
		if c.MetaExtra != nil {
			x := *c.MetaExtra
			x.MetaLabels = maps.Clone(x.MetaLabels)
			if x.DataplaneKept != nil {
				k := *x.DataplaneKept
				x.DataplaneKept = sharedKept(&k)
			}
			c.MetaExtra = sharedMetaExtra(&x)
		}
		if n.NetworkingExtra != nil {
			x := *n.NetworkingExtra
			if strs != nil {
				x.AdvertisedAddress = strs.copy(x.AdvertisedAddress)
			}
			if x.Outbound != nil {
				x.Outbound = slices.Clone(x.Outbound)
				for j := range x.Outbound {
					x.Outbound[j].Tags = x.Outbound[j].Tags.Clone()
				}
			}
			n.NetworkingExtra = sharedNetworkingExtra(&x)
		}
		rs[i] = c
	}
}

// A dataplaneCell is a one-inbound Dataplane allocated with its inbound (the common
// universal dataplane): one object of 176 bytes, a size class of Go's allocator, where the
// two apart take 144 and 48. The tag set stays an object of its own: an edited dataplane
// keeps its unchanged inbounds' sets (dirsource), which would keep a whole old dataplane
// alive were the set a part of it.
type dataplaneCell struct {
	dp Dataplane
	in [1]Inbound
}

// copyDataplane returns a copy of dp whose inbounds are copied too (in its object when it
// has one).
func copyDataplane(dp *Dataplane) *Dataplane {
	if len(dp.Networking.Inbound) != 1 {
		c := *dp
		c.Networking.Inbound = slices.Clone(dp.Networking.Inbound)
		return &c
	}
	cell := &dataplaneCell{dp: *dp, in: [1]Inbound{dp.Networking.Inbound[0]}}
	cell.dp.Networking.Inbound = cell.in[:]
	return &cell.dp
}

// tagSets finds the tag sets already seen by their content.
type tagSets struct {
	byText map[string]Tags
	buf    []byte
	strs   *strArena // when set, a new set's strings are copied there
	live   bool      // share the sets of minLiveSet tags or more through liveSets
}

// setText appends the text of t's tags (each key and value ended by a 0) to b: equal sets
// have equal texts.
func setText(b []byte, t Tags) []byte {
	for _, tg := range t { // sorted by key
		b = append(append(append(append(b, tg.Key...), 0), tg.Value...), 0)
	}
	return b
}

// share returns the set seen before with t's tags, or a copy of t (kept for the next ones).
func (s *tagSets) share(t Tags) Tags {
	if len(t) == 0 {
		return t
	}
	b := setText(s.buf[:0], t)
	s.buf = b
	if m, ok := s.byText[string(b)]; ok {
		return m
	}
	if s.byText == nil {
		s.byText = map[string]Tags{}
	}
	live := s.live && liveShareable(t)
	var h uint64
	if live {
		h = liveHash(b, len(t))
		if m := liveSets.find(h, t); m != nil {
			s.byText[string(b)] = m
			return m
		}
	}
	m := make(Tags, len(t))
	for i, tg := range t {
		if s.strs == nil {
			m[i] = tg
		} else {
			m[i] = Tag{Key: s.strs.key(tg.Key), Value: s.strs.value(tg.Value)}
		}
	}
	s.byText[string(b)] = m
	if live {
		liveSets.add(h, m)
	}
	return m
}
