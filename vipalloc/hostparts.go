package vipalloc

import (
	"cmp"
	"hash/maphash"
	"strings"
)

// meshSuffix ends every default name, `<service>.mesh`.
const meshSuffix = ".mesh"

// hostName is a hostname in two parts, head then tail: a default name of a lower-case
// service is its service and ".mesh" (no string of the whole is kept), any other hostname is
// whole in head. It is compared, hashed and sorted part by part, without being built.
type hostName struct{ head, tail string }

// String builds the hostname (a new string for a two-part name).
func (n hostName) String() string {
	if n.tail == "" {
		return n.head
	}
	return n.head + n.tail
}

func (n hostName) len() int { return len(n.head) + len(n.tail) }

// at is byte i of the hostname.
func (n hostName) at(i int) byte {
	if i < len(n.head) {
		return n.head[i]
	}
	return n.tail[i-len(n.head)]
}

// appendTo appends the hostname to b.
func (n hostName) appendTo(b []byte) []byte { return append(append(b, n.head...), n.tail...) }

// nameIs reports whether n is name.
func nameIs[K string | []byte](n hostName, name K) bool {
	k := len(n.head)
	return len(name) == k+len(n.tail) && string(name[:k]) == n.head && string(name[k:]) == n.tail
}

// equal reports whether n and m are the same hostname.
func (n hostName) equal(m hostName) bool {
	if n.tail == m.tail {
		return n.head == m.head
	}
	return n.len() == m.len() && n.compare(m) == 0
}

// hash is hostHash of the hostname (a two-part one hashed from a buffer on the stack).
func (n hostName) hash() uint64 {
	if n.tail == "" {
		return hostHash(n.head)
	}
	var buf [256]byte
	return maphash.Bytes(hashSeed, n.appendTo(buf[:0]))
}

// compare is strings.Compare of the two hostnames.
func (n hostName) compare(m hostName) int {
	if n.tail == "" && m.tail == "" {
		return strings.Compare(n.head, m.head)
	}
	if n.tail == m.tail && len(n.head) == len(m.head) {
		return strings.Compare(n.head, m.head) // two default names of services of a length
	}
	for {
		if n.head == "" {
			n.head, n.tail = n.tail, ""
		}
		if m.head == "" {
			m.head, m.tail = m.tail, ""
		}
		if n.head == "" || m.head == "" {
			return cmp.Compare(len(n.head), len(m.head)) // the empty one first
		}
		k := min(len(n.head), len(m.head))
		if c := strings.Compare(n.head[:k], m.head[:k]); c != 0 {
			return c
		}
		n.head, m.head = n.head[k:], m.head[k:]
	}
}
