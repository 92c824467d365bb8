package fanout

import (
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kumadp/kuma-dp/cp/decoded"
	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// docCache keeps each stored resource that agents are served as served (its canonical
// encoding and where it is served) at its version, so that a change decodes only what
// changed. Neither the document as stored nor the decoded resource is kept: a replica
// holding a large mesh pays for each stored resource its encoding, its key and a few words.
type docCache struct {
	m       map[cpstore.Key]*cachedDoc
	decodes atomic.Int64 // documents decoded, for tests
}

// cachedDoc is one resource as served. Its kind, mesh and name are its key's, as for every
// resource the API writes; one served under others (a document stored by hand) keeps
// them in other.
type cachedDoc struct {
	version  int64
	body     []byte
	meshless bool
	other    *Doc // the resource as served when not under its key's kind, mesh and name
	err      error
}

// doc is what d serves, stored under k.
func (d *cachedDoc) doc(k cpstore.Key) Doc {
	if d.other != nil {
		return *d.other
	}
	m := k.Mesh
	if d.meshless {
		m = ""
	}
	return Doc{Kind: k.Type, Mesh: m, Name: k.Name, Meshless: d.meshless, Body: d.body}
}

// forAgents reports whether resources of kind typ are served to agents: the link's kinds,
// but not the control plane's own derived ones (a DNSZone written to the store).
func forAgents(typ string) bool {
	return slices.Contains(cplink.Kinds, typ) && !slices.Contains(DerivedKinds, typ)
}

// put takes one resource written (decoded unless the cache holds its version).
func (c *docCache) put(it cpstore.Item, log *slog.Logger) {
	if !forAgents(it.Type) {
		decoded.Pass(it)
		return
	}
	if c.m == nil {
		c.m = map[cpstore.Key]*cachedDoc{}
	}
	if d := c.m[it.Key]; d != nil && d.version == it.Version && it.Version != 0 {
		decoded.Pass(it)
		return
	}
	c.m[it.Key] = c.decode(it, log)
}

// remove forgets a resource deleted.
func (c *docCache) remove(k cpstore.Key) { delete(c.m, k) }

// replace takes items as everything stored: what the cache holds at the same version is
// kept, the rest decoded on every core (a replica's start decodes the whole store), and what
// is no longer stored forgotten.
func (c *docCache) replace(items []cpstore.Item, log *slog.Logger) {
	old := c.m
	c.m = make(map[cpstore.Key]*cachedDoc, len(items))
	var todo []int
	for i, it := range items {
		if !forAgents(it.Type) {
			decoded.Pass(it)
			continue
		}
		if d := old[it.Key]; d != nil && d.version == it.Version && it.Version != 0 {
			decoded.Pass(it)
			c.m[it.Key] = d
			continue
		}
		todo = append(todo, i)
	}
	decoded := make([]*cachedDoc, len(todo))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), 1+len(todo)/decodeBatch) {
		wg.Go(func() {
			for {
				from := int(next.Add(decodeBatch)) - decodeBatch
				if from >= len(todo) {
					return
				}
				for j := from; j < min(from+decodeBatch, len(todo)); j++ {
					decoded[j] = c.decode(items[todo[j]], log)
				}
			}
		})
	}
	wg.Wait()
	for j, i := range todo {
		c.m[items[i].Key] = decoded[j]
	}
}

// decodeBatch is how many documents a decoding worker takes at a time.
const decodeBatch = 64

// decode is what it serves, decoded and encoded; an error is logged once, here.
func (c *docCache) decode(it cpstore.Item, log *slog.Logger) *cachedDoc {
	c.decodes.Add(1)
	d := &cachedDoc{version: it.Version}
	doc, err := servedDoc(it)
	if err != nil {
		log.Error("a stored resource cannot be served", "resource", it.Key.String(), "error", err)
		d.err = err
		return d
	}
	d.body, d.meshless = doc.Body, doc.Meshless
	if k := d.doc(it.Key); doc.Kind != k.Kind || doc.Mesh != k.Mesh || doc.Name != k.Name {
		// the decoded resource's strings sit in its decoder's blocks: copies keep none of
		// them alive
		doc.Mesh, doc.Name = strings.Clone(doc.Mesh), strings.Clone(doc.Name)
		d.other = &doc
	}
	return d
}

// served is what agents are served of the resources held, in the order of their keys (of
// two stored resources served under one name, the last key wins, as a list's order gave).
func (c *docCache) served() Served {
	keys := make([]cpstore.Key, 0, len(c.m))
	for k, d := range c.m {
		if d.err == nil {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, compareKeys)
	sv := NewServed()
	for _, k := range keys {
		sv.Put(c.m[k].doc(k))
	}
	return sv
}

// servedDoc decodes a stored document (once for the store's followers: package decoded) and
// encodes it as the link carries it. The store's creation time is the resource's (it orders
// collisions on the agents), never a creationTime the document gives.
func servedDoc(it cpstore.Item) (Doc, error) {
	one, err := decoded.One(it)
	if err != nil {
		return Doc{}, err
	}
	r := decoded.Copy(one) // the decoded resource is the other followers' too
	if rt, ok := r.(*mesh.Router); ok {
		// its replicas' readiness is the control plane's (the zones carry it to the
		// agents): a readiness change is no change of the Router for them
		rt.Status = nil
	}
	m := r.GetMeta()
	if !it.Created.IsZero() || m.CreationTime().IsZero() {
		m.SetCreationTime(it.Created)
	}
	body, err := cplink.EncodeResource(r)
	if err != nil {
		return Doc{}, fmt.Errorf("cannot encode: %w", err)
	}
	return Doc{Kind: r.Kind(), Mesh: mesh.ResourceMesh(m), Name: mesh.StoreName(r), Meshless: mesh.Meshless(r), Body: body}, nil
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
	if a.Mesh == b.Mesh && a.Type == b.Type { // most compares (a kind's resources): the names decide
		return strings.Compare(a.Name, b.Name)
	}
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
