package routesched

import (
	"context"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
)

// relistEvery is how many Resyncs pass between two listings of the store while a watch
// holds: the watch misses nothing (it resumes after the last revision delivered, and a
// compaction ends it: Run lists again), so a listing is a safety net - at 10,000 routes
// bound it holds the writes that arrive meanwhile for about a second on a loaded machine.
const relistEvery = 10

// follow keeps one watch open from rev, applying its changes to the mirror the pass at rev
// listed, and runs a pass on the mirror after each change of a routing resource (after a
// short debounce, so a burst is one pass) and when a retry is due (next): a pass on the
// changes only (passDirty). Every Resync a pass checks again a tenth of the bindings kept
// (those of slice resyncs, from scratch) and computes again in full the admission of a
// tenth of the routers, so every binding and router is checked again every relistEvery
// Resyncs without a write ever waiting for a pass over all of them; and every relistEvery
// Resyncs it lists the store again (a pass that checks everything). It returns for a full
// restart when the watch ends (compaction) or a pass fails.
func (rc *Reconciler) follow(ctx context.Context, rev int64, next time.Time) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := rc.Store.Watch(wctx, rev)
	resync, resyncs := time.Now().Add(rc.Resync), 0
	for {
		d := time.Until(resync)
		if !next.IsZero() {
			d = min(d, max(time.Until(next), 10*time.Millisecond))
		}
		if !rc.await(ctx, events, d) {
			return
		}
		var err error
		switch {
		case time.Now().Before(resync):
			next, err = rc.passOnMirror(ctx, false, -1)
		case resyncs+1 < relistEvery:
			next, err = rc.passOnMirror(ctx, false, resyncs)
			resync, resyncs = time.Now().Add(rc.Resync), resyncs+1
		default:
			_, next, err = rc.Pass(ctx)
			resync, resyncs = time.Now().Add(rc.Resync), 0
		}
		if err != nil {
			rc.Log.Warn("route scheduling pass failed; retrying", "error", err)
			return
		}
	}
}

// passOnMirror is a pass on what the watch has shown: on the changes only (passDirty), and
// the slice of the bindings and routers checked again (0 to relistEvery-1; -1: none),
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

// await applies watched changes to the mirror until one changes it (then the rest of its
// burst: at most 10 debounces, so a steady stream of writes still gets passes) or d has
// passed. It is false when the watch ended (or ctx).
func (rc *Reconciler) await(ctx context.Context, events <-chan store.Event, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for changed := false; !changed; {
		select {
		case <-ctx.Done():
			return false
		case <-timer.C:
			return true
		case e, ok := <-events:
			if !ok || e.Type == store.Relist {
				return false
			}
			changed = rc.mirror.apply(e)
		}
	}
	for until := time.Now().Add(10 * debounce); time.Now().Before(until); {
		select {
		case e, ok := <-events:
			if !ok || e.Type == store.Relist {
				return false
			}
			rc.mirror.apply(e)
		case <-time.After(debounce):
			return true
		case <-ctx.Done():
			return false
		}
	}
	return true
}
