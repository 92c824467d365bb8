package vipalloc

import (
	"encoding/hex"
	"encoding/json"
	"hash/maphash"
	"math/bits"

	"github.com/kumadp/kuma-dp/mesh"
)

// hashSeed makes entry hashes comparable within one process.
var hashSeed = maphash.MakeSeed()

// entrySum is the content hash of one entry (128 bits from two seeded passes). Table hashes
// add them up, so a table derived from another updates its hash in O(change). The
// allocator's keys spell out their tags (`<policy>{k=v,...}`), so it hashes without them.
func entrySum(e *Entry, withTags bool) [2]uint64 {
	var h maphash.Hash
	h.SetSeed(hashSeed)
	writeEntry(&h, e, withTags)
	a := h.Sum64()
	// The second word is derived from the first (64 bits of strength; sums of independent
	// 64-bit hashes are plenty to tell tables apart).
	return [2]uint64{a, bits.RotateLeft64(a*0x9e3779b97f4a7c15, 29)}
}

func writeEntry(h *maphash.Hash, e *Entry, withTags bool) {
	ws := func(s string) { h.WriteString(s); h.WriteByte(0) }
	ws(e.Hostname)
	b4, b6 := e.IPv4.As16(), e.IPv6.As16()
	if e.IPv4.IsValid() {
		h.Write(b4[:])
	}
	if e.IPv6.IsValid() {
		h.Write(b6[:])
	}
	h.WriteByte(1)
	for _, p := range e.Ports {
		h.WriteByte(byte(p >> 8))
		h.WriteByte(byte(p))
	}
	ws(e.Origin.Kind)
	ws(e.Origin.Name)
	ws(e.Key)
	ws(string(e.Status))
	ws(e.Reason)
	ws(e.MeshExternalService)
	if withTags {
		writeTags(h, e.Tags)
	}
	for _, tg := range e.Targets {
		h.WriteByte(byte(tg.Port >> 8))
		h.WriteByte(byte(tg.Port))
		ws(tg.Origin.Kind)
		ws(tg.Origin.Name)
		ws(tg.Key)
		if withTags {
			writeTags(h, tg.Tags)
		}
	}
}

// writeTags hashes a tag map independently of iteration order.
func writeTags(h *maphash.Hash, tags mesh.Tags) {
	var x uint64
	for k, v := range tags {
		x += maphash.String(hashSeed, k) ^ maphash.String(hashSeed, v)*31
	}
	var b [8]byte
	for i := range b {
		b[i] = byte(x >> (8 * i))
	}
	h.Write(b[:])
}

func tableHash(sum [2]uint64, mes map[string]MESStatus) string {
	var b [16]byte
	for i := 0; i < 8; i++ {
		b[i] = byte(sum[0] >> (8 * i))
		b[8+i] = byte(sum[1] >> (8 * i))
	}
	if len(mes) > 0 {
		js, _ := json.Marshal(mes) // sorted keys: stable
		x := maphash.Bytes(hashSeed, js)
		for i := 0; i < 8; i++ {
			b[i] ^= byte(x >> (8 * i))
		}
	}
	return hex.EncodeToString(b[:])
}
