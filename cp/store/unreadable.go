package store

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
)

// ValidPrefix reports whether prefix can be an installation's key prefix: one path segment
// ("/kuma"), its keys under "/kuma/", its leader's and replicas' under "/kuma-leader/" and
// "/kuma-presence/", its zones' serials under "/kuma-zones/" (cp/shardzones). Two installations on one etcd then never read each other's keys:
// "/kuma/staging" would put its keys among "/kuma"'s resources (mesh "staging"), and
// "/kuma-leader" its resources among "/kuma"'s leader keys.
func ValidPrefix(prefix string) error {
	name, ok := strings.CutPrefix(prefix, "/")
	switch {
	case !ok || name == "":
		return fmt.Errorf("want one path segment such as /kuma")
	case strings.Contains(name, "/"):
		return fmt.Errorf("one path segment only (two installations on one etcd: /kuma and /kuma-staging, never one inside the other)")
	case strings.ContainsFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }):
		return fmt.Errorf("no whitespace or control characters")
	case strings.HasSuffix(name, "-leader") || strings.HasSuffix(name, "-presence") || strings.HasSuffix(name, "-zones"):
		return fmt.Errorf("must not end in -leader, -presence or -zones (another installation's leader, replica or zone serial keys)")
	}
	return nil
}

// unreadable reports keys under the prefix that hold no resource (a value that is no
// envelope, a key that is not <mesh>/<type>/<name>: written by hand, by another program):
// lists and watches skip them, and each version of such a key is logged once and counted.
type unreadable struct {
	count atomic.Int64
	mu    sync.Mutex
	seen  map[string]int64 // key -> the version reported
}

// maxUnreadableSeen bounds what unreadable remembers: past it, it starts again (keys
// reported again, once each).
const maxUnreadableSeen = 10000

// skip reports that key at version rev holds no resource.
func (s *Etcd) skip(key string, rev int64, err error) {
	u := &s.unreadable
	u.mu.Lock()
	if u.seen[key] == rev {
		u.mu.Unlock()
		return
	}
	if u.seen == nil || len(u.seen) >= maxUnreadableSeen {
		u.seen = map[string]int64{}
	}
	u.seen[key] = rev
	u.mu.Unlock()
	u.count.Add(1)
	if s.Log != nil {
		s.Log.Warn("a key under the store's prefix holds no resource; skipped", "key", key, "version", rev, "error", err)
	}
}

// Unreadable is how many key versions under the prefix were found holding no resource
// (each counted once).
func (s *Etcd) Unreadable() int64 { return s.unreadable.count.Load() }
