package fanout

import (
	"sync"
	"sync/atomic"
	"time"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// docCache keeps each stored resource decoded and encoded at its version, so that serving
// the store after a change decodes only what changed.
type docCache struct {
	m       map[cpstore.Key]*cachedDoc
	decodes atomic.Int64 // documents decoded, for tests
}

type cachedDoc struct {
	version int64
	rs      []mesh.Resource
	err     error
	body    []byte
	berr    error
	encoded bool
}

func (c *docCache) at(it cpstore.Item) *cachedDoc {
	if c.m == nil {
		c.m = map[cpstore.Key]*cachedDoc{}
	}
	d := c.m[it.Key]
	if d == nil || d.version != it.Version || it.Version == 0 {
		d = &cachedDoc{version: it.Version}
		d.rs, d.err = mesh.Decode(it.Key.String(), it.Doc)
		c.decodes.Add(1)
		c.m[it.Key] = d
	}
	return d
}

// decode is mesh.Decode of the item's document, once per version.
func (c *docCache) decode(it cpstore.Item) ([]mesh.Resource, error) {
	d := c.at(it)
	return d.rs, d.err
}

// encode is cplink.EncodeResource of the item's resource, once per version.
func (c *docCache) encode(it cpstore.Item, r mesh.Resource) ([]byte, error) {
	d := c.at(it)
	if !d.encoded {
		d.body, d.berr = cplink.EncodeResource(r)
		d.encoded = true
	}
	return d.body, d.berr
}

// keep forgets the resources no longer stored.
func (c *docCache) keep(items map[cpstore.Key]cpstore.Item) {
	for k := range c.m {
		if _, ok := items[k]; !ok {
			delete(c.m, k)
		}
	}
}

// lag is how far the served resources are behind the store's watch: the last revision seen
// on it, the last served, and since when a seen change waits to be served.
type lag struct {
	mu          sync.Mutex
	seenRev     atomic.Int64
	servedRev   atomic.Int64
	behindSince time.Time // zero while every change seen is served
}

func (l *lag) seen(rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev > l.seenRev.Load() {
		l.seenRev.Store(rev)
	}
	if l.behindSince.IsZero() && l.seenRev.Load() > l.servedRev.Load() {
		l.behindSince = time.Now()
	}
}

func (l *lag) served(rev int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.servedRev.Store(rev)
	if rev > l.seenRev.Load() {
		l.seenRev.Store(rev)
	}
	if rev >= l.seenRev.Load() {
		l.behindSince = time.Time{}
	}
}

// SeenRevision is the last store revision seen on the watch (served or not yet).
func (f *Feed) SeenRevision() int64 { return f.lag.seenRev.Load() }

// Lag is how far what agents are served is behind the store's watch: in revisions seen and
// not yet served, and for how long the oldest of them has waited (0 when caught up).
func (f *Feed) Lag() (revisions int64, behind time.Duration) {
	f.lag.mu.Lock()
	defer f.lag.mu.Unlock()
	revisions = max(0, f.lag.seenRev.Load()-f.lag.servedRev.Load())
	if !f.lag.behindSince.IsZero() {
		behind = time.Since(f.lag.behindSince)
	}
	return revisions, behind
}

// compareKeys orders keys as their strings (mesh/type/name) do, the order a store's list
// gives, without building the strings.
func compareKeys(a, b cpstore.Key) int {
	as := [5]string{a.Mesh, "/", a.Type, "/", a.Name}
	bs := [5]string{b.Mesh, "/", b.Type, "/", b.Name}
	i, j, ai, bj := 0, 0, 0, 0 // part and offset in a, in b
	for {
		for i < 5 && ai == len(as[i]) {
			i, ai = i+1, 0
		}
		for j < 5 && bj == len(bs[j]) {
			j, bj = j+1, 0
		}
		switch {
		case i == 5 && j == 5:
			return 0
		case i == 5:
			return -1
		case j == 5:
			return 1
		}
		if ca, cb := as[i][ai], bs[j][bj]; ca != cb {
			if ca < cb {
				return -1
			}
			return 1
		}
		ai, bj = ai+1, bj+1
	}
}
