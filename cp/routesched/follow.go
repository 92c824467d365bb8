package routesched

import (
	"context"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// follow keeps one watch open from rev and runs a pass after each change of a routing
// resource (after a short debounce, so a burst is one pass), when a retry is due (next) and
// every Resync. It returns for a full restart when the watch ends (compaction) or a pass
// fails.
func (rc *Reconciler) follow(ctx context.Context, rev int64, next time.Time) {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events := rc.Store.Watch(wctx, rev)
	for {
		d := rc.Resync
		if !next.IsZero() {
			d = min(d, max(time.Until(next), 10*time.Millisecond))
		}
		timer := time.NewTimer(d)
		changed := false
		for !changed {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
				changed = true
			case e, ok := <-events:
				if !ok || e.Type == store.Relist {
					timer.Stop()
					return
				}
				switch e.Item.Type {
				case mesh.KindRouter, mesh.KindRoute, mesh.KindRouteBinding:
					changed = true
				}
			}
		}
		timer.Stop()
		// Debounce: take the rest of a burst before the pass (at most 10 debounces, so a
		// steady stream of writes still gets passes).
		for drained, until := false, time.Now().Add(10*debounce); !drained; {
			select {
			case e, ok := <-events:
				if !ok || e.Type == store.Relist {
					return
				}
				drained = time.Now().After(until)
			case <-time.After(debounce):
				drained = true
			case <-ctx.Done():
				return
			}
		}
		var err error
		if _, next, err = rc.Pass(ctx); err != nil {
			rc.Log.Warn("route scheduling pass failed; retrying", "error", err)
			return
		}
	}
}
