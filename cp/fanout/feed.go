package fanout

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
)

// Feed serves the agents what the store holds: a list, then every change from the
// list's revision on (re-listed when the store says the revision was compacted). Each
// replica runs one; replicas on one store serve the same resources.
type Feed struct {
	st     cpstore.Store
	cp     *ControlPlane
	log    *slog.Logger
	synced atomic.Bool  // the store was listed and its changes followed
	rev    atomic.Int64 // the store revision served

	mu        sync.Mutex // guards what is served (derived.go)
	fromStore Served
	haveStore bool
	derived   map[string][]Doc
}

// NewFeed is a Feed of st into cp.
func NewFeed(st cpstore.Store, cp *ControlPlane, log *slog.Logger) *Feed {
	return &Feed{st: st, cp: cp, log: log}
}

// Synced reports whether the store was read and its changes are followed.
func (f *Feed) Synced() bool { return f.synced.Load() }

// Revision is the store revision served.
func (f *Feed) Revision() int64 { return f.rev.Load() }

// Run follows the store until ctx ends; a store that cannot be reached is retried, and
// what was served last keeps being served meanwhile.
func (f *Feed) Run(ctx context.Context) {
	for ctx.Err() == nil {
		rev, err := f.relist(ctx)
		if err != nil {
			f.synced.Store(false)
			f.log.Warn("store unreachable; serving the last resources read", "error", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		f.follow(ctx, rev)
	}
}

// relist reads everything and serves it.
func (f *Feed) relist(ctx context.Context) (int64, error) {
	items, _, rev, err := f.st.List(ctx, "", "", "", 0)
	if err != nil {
		return 0, err
	}
	sv := f.served(items)
	updated, removed := f.applyStore(sv)
	f.rev.Store(rev)
	f.synced.Store(true)
	f.log.Info("resources read from the store", "revision", rev, "resources", sv.Count(), "updated", updated, "removed", removed)
	return rev, nil
}

// follow applies the store's changes from rev on; it returns when the watch ends (ctx,
// compaction), for a re-list.
func (f *Feed) follow(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := f.st.Watch(wctx, rev)
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-events:
			if !ok || e.Type == cpstore.Relist {
				if ok {
					f.log.Warn("the store compacted past the revision followed; reading everything again", "revision", f.rev.Load())
				}
				return
			}
			// A burst of writes is applied once: wait briefly for the rest of it.
			last := e.Revision
			for drained := false; !drained; {
				select {
				case e2, ok := <-events:
					if !ok || e2.Type == cpstore.Relist {
						return
					}
					last = e2.Revision
				case <-time.After(20 * time.Millisecond):
					drained = true
				}
			}
			if _, err := f.relist(ctx); err != nil {
				f.log.Warn("store unreachable after a change; will read it again", "revision", last, "error", err)
				return
			}
		}
	}
}

// served turns stored documents into what agents are sent. The store's creation time is
// the resource's (it orders collisions on the agents).
func (f *Feed) served(items []cpstore.Item) Served {
	sv := NewServed()
	for _, it := range items {
		if !slices.Contains(cplink.Kinds, it.Type) || slices.Contains(DerivedKinds, it.Type) {
			continue // the control plane's own resources (routers, routes): not for agents
		}
		rs, err := mesh.Decode(it.Key.String(), it.Doc)
		if err != nil || len(rs) != 1 {
			f.log.Error("a stored resource does not decode; not served", "resource", it.Key.String(), "error", err)
			continue
		}
		r := rs[0]
		m := r.GetMeta()
		if m.CreationTime.IsZero() {
			m.CreationTime = it.Created
		}
		body, err := cplink.EncodeResource(r)
		if err != nil {
			f.log.Error("cannot encode", "resource", it.Key.String(), "error", err)
			continue
		}
		sv.Put(Doc{Kind: r.Kind(), Mesh: mesh.ResourceMesh(m), Name: m.Name, Meshless: mesh.Meshless(r), Body: body, Source: it.Key.String()})
	}
	return sv
}
