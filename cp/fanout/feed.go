package fanout

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	cpstore "github.com/kumadp/kuma-dp/cp/store"
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
	// content is the revision of the newest change of the resources served (contentRev).
	content atomic.Int64
	lag     lag   // the store revision seen on the watch, and since when it is not served
	next    int64 // the revision of docs, served or not
	// nextContent: the revision of docs' newest change, served or not
	nextContent int64
	docs        docCache // what the store holds for agents, as followed (Run's goroutine only)

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

// ContentRevision is the store revision of the newest change (a write or a delete) of the
// resources served: a property of what is served, the same on every replica serving the same
// resources (Revision, the revision read up to, also counts writes of other keys and depends
// on when the replica last read). 0 until the store was read.
func (f *Feed) ContentRevision() int64 { return f.content.Load() }

// lastDeleter is a store that can tell its newest delete (Etcd).
type lastDeleter interface {
	LastDelete(ctx context.Context, rev int64) (int64, error)
}

// contentRev is the revision of the newest change of items, listed at rev: the newest
// version among them, or the store's newest delete when later.
func (f *Feed) contentRev(ctx context.Context, items []cpstore.Item, rev int64) int64 {
	var newest int64
	for _, it := range items {
		newest = max(newest, it.Version)
	}
	if ld, ok := f.st.(lastDeleter); ok {
		del, err := ld.LastDelete(ctx, rev)
		if err != nil {
			f.log.Debug("the store's newest delete is not read; the content revision is its newest write", "error", err)
		}
		newest = max(newest, del)
	}
	return newest
}

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
	content := f.contentRev(ctx, items, rev)
	sv := f.load(items)
	items = nil // the documents as stored are not kept: only what agents are served
	updated, removed := f.applyStore(sv)
	f.next = rev
	f.rev.Store(rev)
	f.content.Store(content)
	f.lag.served(rev)
	f.synced.Store(true)
	f.log.Info("resources read from the store", "revision", rev, "resources", sv.Count(), "updated", updated, "removed", removed)
	cpstore.ListDone() // the memory of the documents listed, returned to the system
	return rev, nil
}

// follow applies the store's changes from rev on; it returns when the watch ends (ctx,
// compaction), for a re-list. Only the resources that changed are decoded again.
func (f *Feed) follow(ctx context.Context, rev int64) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := f.st.Watch(wctx, rev)
	var lastServed time.Time
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
			f.lag.seen(e.Revision)
			f.apply(e)
			// What is queued already goes with it; a change that follows the last one served
			// within 10 ms waits for the rest of those 10 ms, so a burst of writes is served
			// a few times, not once per write, and a lone change at once.
			take := func(e cpstore.Event, ok bool) bool {
				if !ok || e.Type == cpstore.Relist {
					return false
				}
				f.lag.seen(e.Revision)
				f.apply(e)
				return true
			}
			deadline := lastServed.Add(10 * time.Millisecond)
			for {
				for queued := true; queued; {
					select {
					case e2, ok := <-events:
						if !take(e2, ok) {
							return
						}
					default:
						queued = false
					}
				}
				wait := time.Until(deadline)
				if wait <= 0 {
					break
				}
				t := time.NewTimer(wait)
				select {
				case e2, ok := <-events:
					t.Stop()
					if !take(e2, ok) {
						return
					}
				case <-t.C:
				case <-ctx.Done():
					t.Stop()
					return
				}
			}
			f.serve()
			lastServed = time.Now()
		}
	}
}

// apply records one change of the store: a put is decoded at once (its document as stored is
// not kept), a delete forgets the resource.
func (f *Feed) apply(e cpstore.Event) {
	switch e.Type {
	case cpstore.Put:
		f.docs.put(e.Item, f.log)
	case cpstore.Delete:
		f.docs.remove(e.Item.Key)
	}
	f.next = max(f.next, e.Revision)
	f.nextContent = max(f.nextContent, e.Revision)
}

// serve serves the resources followed, compared with what the agents hold, so only what
// changed is sent.
func (f *Feed) serve() {
	sv := f.docs.served()
	updated, removed := f.applyStore(sv)
	f.rev.Store(f.next)
	f.content.Store(max(f.content.Load(), f.nextContent))
	f.lag.served(f.next)
	f.log.Debug("store changes served", "revision", f.next, "resources", sv.Count(), "updated", updated, "removed", removed)
}

// load takes items as everything the store holds (decoding only what is new or changed
// since the cache last saw it) and returns what agents are served of them.
func (f *Feed) load(items []cpstore.Item) Served {
	f.docs.replace(items, f.log)
	return f.docs.served()
}
