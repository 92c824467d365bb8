package fanout

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// docCache keeps each stored resource as served (its canonical encoding and where it is
// served) at its version, so that serving the store after a change decodes only what
// changed. The decoded resource is not kept: a replica holding a large mesh pays for each
// stored resource its encoding, not its decoded form.
type docCache struct {
	m       map[cpstore.Key]*cachedDoc
	decodes atomic.Int64 // documents decoded, for tests
}

type cachedDoc struct {
	version int64
	doc     Doc // Source unset
	err     error
}

// doc is what item it serves, decoded and encoded once per version.
func (c *docCache) doc(it cpstore.Item) (Doc, error) {
	if c.m == nil {
		c.m = map[cpstore.Key]*cachedDoc{}
	}
	d := c.m[it.Key]
	if d == nil || d.version != it.Version || it.Version == 0 {
		d = &cachedDoc{version: it.Version}
		d.doc, d.err = servedDoc(it)
		c.decodes.Add(1)
		c.m[it.Key] = d
	}
	return d.doc, d.err
}

// servedDoc decodes a stored document and encodes it as the link carries it. The store's
// creation time is the resource's (it orders collisions on the agents), never a
// creationTime the document gives.
func servedDoc(it cpstore.Item) (Doc, error) {
	rs, err := mesh.Decode(it.Key.String(), it.Doc)
	if err == nil && len(rs) != 1 {
		err = fmt.Errorf("%d resources in one stored document, want 1", len(rs))
	}
	if err != nil {
		return Doc{}, fmt.Errorf("does not decode: %w", err)
	}
	r := rs[0]
	m := r.GetMeta()
	if !it.Created.IsZero() || m.CreationTime.IsZero() {
		m.CreationTime = it.Created
	}
	body, err := cplink.EncodeResource(r)
	if err != nil {
		return Doc{}, fmt.Errorf("cannot encode: %w", err)
	}
	return Doc{Kind: r.Kind(), Mesh: mesh.ResourceMesh(m), Name: mesh.StoreName(r), Meshless: mesh.Meshless(r), Body: body}, nil
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
