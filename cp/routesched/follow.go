package routesched

import (
	"context"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
)

// checkSlices is how many slices the routes are checked again in, one every tenth of a
// Resync (each route every 10 Resyncs: 100 s by default, 100 routes a second at 10,000),
// and how many slices pass between two listings of the store while a watch holds. The watch
// misses nothing (it resumes after the last revision delivered, and a compaction ends it:
// Run lists again), so a listing is a safety net: it is read beside the passes, and what
// the mirror lacks of it is a change for the next pass - no write waits for it.
const checkSlices = 100

// follow keeps one watch open from rev, applying its changes to the mirror the pass at rev
// listed, and runs a pass on the mirror after each change of a routing resource and when a
// retry is due (next): a pass on the changes only (passDirty). A change after a quiet spell
// is passed on at once; the rest of a burst waits for a short debounce, so a burst is one
// pass. Every tenth of a Resync a pass also checks again a slice of the routes (their
// bindings from scratch) and computes again in full the admission of a router now and then
// (checkSlice), so every binding and router is checked again every 10 Resyncs without a
// write ever waiting for a pass over all of them; every checkSlices slices the store is
// listed beside the passes (relist). It returns for a full restart when the watch ends
// (compaction) or a pass fails.
func (rc *Reconciler) follow(ctx context.Context, rev int64, next time.Time) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := rc.Store.Watch(wctx, rev)
	tick := max(rc.Resync/10, time.Millisecond)
	resync, slice := time.Now().Add(tick), 0
	var listed <-chan *listing
	for {
		d := time.Until(resync)
		if !next.IsZero() {
			d = min(d, max(time.Until(next), 10*time.Millisecond))
		}
		l, ok := rc.await(ctx, events, listed, d)
		if !ok {
			return
		}
		var err error
		switch {
		case l != nil:
			listed = nil
			if l.err != nil {
				rc.Log.Warn("listing routers, routes and bindings failed; next time", "error", l.err)
				break
			}
			rc.forgetDeleted(l.lists[:]...)
			if n := rc.mirror.repair(l); n > 0 {
				rc.Log.Warn("the listing holds changes the watch did not show: passing on them", "changes", n)
			}
			next, err = rc.passOnMirror(ctx, false, -1)
		case time.Now().Before(resync):
			next, err = rc.passOnMirror(ctx, false, -1)
		default:
			next, err = rc.passOnMirror(ctx, false, slice)
			resync, slice = time.Now().Add(tick), (slice+1)%checkSlices
			if slice == 0 && listed == nil {
				listed = rc.relist(wctx)
			}
		}
		rc.lastPass = time.Now()
		if err != nil {
			rc.Log.Warn("route scheduling pass failed; retrying", "error", err)
			return
		}
	}
}

// passOnMirror is a pass on what the watch has shown: on the changes only (passDirty), and
// the slice of the routes and routers checked again (0 to checkSlices-1; -1: none),
// unless all (every binding checked again) or a router changed or a mesh is new.
func (rc *Reconciler) passOnMirror(ctx context.Context, all bool, slice int) (time.Time, error) {
	dirty := rc.mirror.takeDirty()
	if !all && rc.canPassDirty(dirty) {
		return rc.passDirty(ctx, dirty, slice)
	}
	routers, routes, bindings := rc.mirror.lists()
	rc.forgetDeleted(routers, routes, bindings)
	rc.checkAll = true
	defer func() { rc.checkAll = false }()
	return rc.pass(ctx, routers, routes, bindings)
}

// await applies watched changes to the mirror until one changes it, or d has passed, or a
// listing arrived (returned). A change after a quiet spell (no pass for a debounce) is
// passed on at once with what came with it; otherwise the rest of its burst is waited for
// (at most 10 debounces, so a steady stream of writes still gets passes). It is false when
// the watch ended (or ctx).
func (rc *Reconciler) await(ctx context.Context, events <-chan store.Event, listed <-chan *listing, d time.Duration) (*listing, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for changed := false; !changed; {
		select {
		case <-ctx.Done():
			return nil, false
		case <-timer.C:
			return nil, true
		case l := <-listed:
			return l, true
		case e, ok := <-events:
			if !ok || e.Type == store.Relist {
				return nil, false
			}
			changed = rc.mirror.apply(e)
		}
	}
	if time.Since(rc.lastPass) >= debounce {
		for {
			select {
			case e, ok := <-events:
				if !ok || e.Type == store.Relist {
					return nil, false
				}
				rc.mirror.apply(e)
				continue
			default:
			}
			return nil, true
		}
	}
	for until := time.Now().Add(10 * debounce); time.Now().Before(until); {
		select {
		case e, ok := <-events:
			if !ok || e.Type == store.Relist {
				return nil, false
			}
			rc.mirror.apply(e)
		case <-time.After(debounce):
			return nil, true
		case <-ctx.Done():
			return nil, false
		}
	}
	return nil, true
}
