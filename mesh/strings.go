package mesh

import "unsafe"

// strArena holds the strings of the resources decoded from one file. A parsed document's
// keys and values are slices of the document's text, so a resource that kept them would
// keep the whole text alive (a Dataplane of ~150 bytes of YAML keeps all of it, plus its
// "file#N" source); the decoder copies each string it stores into large shared blocks
// instead, and stores one copy of the strings that repeat (tag keys, mesh names, states):
// 100,000 decoded Dataplanes then hold their names, addresses and tags in a few MiB.
//
// Strings handed out are never written again (blocks only grow at their end), so they are
// ordinary immutable strings; a block lives as long as any string in it, which is as long
// as the file's resources.
type strArena struct {
	block  []byte
	common map[string]string
}

// arenaBlock is the size of one block of copied strings.
const arenaBlock = 32 << 10

func newStrArena() *strArena { return &strArena{common: make(map[string]string, 16)} }

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
	c := a.put(s)
	a.common[c] = c
	return c
}

func (a *strArena) put(s string) string {
	if len(s) > arenaBlock/4 {
		return string([]byte(s)) // large: a copy of its own
	}
	if len(a.block)+len(s) > cap(a.block) {
		a.block = make([]byte, 0, arenaBlock)
	}
	a.block = append(a.block, s...)
	return unsafe.String(&a.block[len(a.block)-len(s)], len(s))
}
