package dirsource

import (
	"crypto/sha256"
	"hash"
)

// digest is what the loader keeps of a file's content: the first 16 bytes of its SHA-256.
// It only ever tells a file's content from the content it had (a rewrite with the same
// bytes, a touch, keeps what was decoded), so 128 bits are ample, and an entry of the
// file cache is 16 bytes smaller than with the whole sum (a directory of a file per
// dataplane keeps one for each).
type digest [16]byte

// digestOf is the digest of b.
func digestOf(b []byte) digest {
	sum := sha256.Sum256(b)
	return digest(sum[:16])
}

// digestSum is the digest of what h (a SHA-256) was written.
func digestSum(h hash.Hash) digest {
	var sum [sha256.Size]byte
	return digest(h.Sum(sum[:0])[:16])
}
