package routesched

import (
	"context"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
)

// follow keeps one watch open from rev, applying its changes to the mirror the pass at rev
// listed, and runs a pass on the mirror after each change of a routing resource (after a
// short debounce, so a burst is one pass) and when a retry is due (next); every Resync it
// lists the store again (a pass from scratch: a failed write or a missed change is retried).
// It returns for a full restart when the watch ends (compaction) or a pass fails.
func (rc *Reconciler) follow(ctx context.Context, rev int64, next time.Time) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := rc.Store.Watch(wctx, rev)
	relist := time.Now().Add(rc.Resync)
	for {
		d := time.Until(relist)
		if !next.IsZero() {
			d = min(d, max(time.Until(next), 10*time.Millisecond))
		}
		if !rc.await(ctx, events, d) {
			return
		}
		var err error
		if time.Now().Before(relist) {
			routers, routes, bindings := rc.mirror.lists()
			next, err = rc.pass(ctx, routers, routes, bindings)
		} else {
			_, next, err = rc.Pass(ctx)
			relist = time.Now().Add(rc.Resync)
		}
		if err != nil {
			rc.Log.Warn("route scheduling pass failed; retrying", "error", err)
			return
		}
	}
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
