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
	var buf [256]byte
	b := appendEntry(buf[:0], e)
	x := maphash.Bytes(hashSeed, b)
	if withTags {
		x ^= tagsHash(e.Tags())
		for _, tg := range e.Targets() {
			x = x*31 ^ tagsHash(tg.Tags)
		}
	}
	// The second word is derived from the first (64 bits of strength; sums of independent
	// 64-bit hashes are plenty to tell tables apart).
	return [2]uint64{x, bits.RotateLeft64(x*0x9e3779b97f4a7c15, 29)}
}

// appendEntry appends the fields that identify an entry's answers, 0-separated.
func appendEntry(b []byte, e *Entry) []byte {
	b = append(append(b, e.Hostname...), 0)
	if ip := e.IPv4(); ip.IsValid() {
		a := ip.As16()
		b = append(b, a[:]...)
	}
	b = append(b, 0)
	if ip := e.IPv6(); ip.IsValid() {
		a := ip.As16()
		b = append(b, a[:]...)
	}
	b = append(b, 0)
	for i := range e.numPorts() {
		p := e.portAt(i)
		b = append(b, byte(p>>8), byte(p))
	}
	o := e.Origin()
	b = append(append(b, 0), o.Kind...)
	b = append(append(b, 0), o.Name...)
	b = e.appendKey(append(b, 0))
	b = append(append(b, 0), e.Status.String()...)
	b = append(append(b, 0), e.Reason()...)
	b = append(append(b, 0), e.MeshExternalService()...)
	b = append(append(b, 0), e.MeshService()...)
	for _, tg := range e.Targets() {
		b = append(b, 1, byte(tg.Port>>8), byte(tg.Port))
		b = append(append(b, 0), tg.Origin.Kind...)
		b = append(append(b, 0), tg.Origin.Name...)
		b = append(append(b, 0), tg.Key...)
	}
	return b
}

// tagsHash hashes a tag set (a sum: independent of the order, as it was for maps).
func tagsHash(tags mesh.Tags) uint64 {
	var x uint64
	for _, tg := range tags {
		x += maphash.String(hashSeed, tg.Key) ^ maphash.String(hashSeed, tg.Value)*31
	}
	return x
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
