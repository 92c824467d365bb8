package routesched

import (
	"context"
	"errors"
	"time"

	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// Mass unbinding: a pass that would undo more than half of a router's bindings (and more
// than MassUnbindMin of them) undoes at most a tenth of them (at least MassUnbindMin) and
// takes the next batch MassUnbindPause later, re-reading the store each time - a change
// that would take most of a router's routes at once (its dns, its selector, a router
// deleted) is logged and done in steps, and stops as soon as it is reverted.
const (
	MassUnbindMin   = 50
	MassUnbindPause = time.Second
)

// undoing is a binding a pass decided to undo, with why and the keys it decided from.
type undoing struct {
	ri          routeItem
	router      string      // the router it is bound to ("" when it has no binding)
	binding     *store.Item // as read; nil when it has none
	reason, msg string
	guards      []store.Write
}

// limitUndo keeps, of each router's undoings, what one pass may undo (MassUnbindMin): the
// rest wait for a later pass, logged.
func (rc *Reconciler) limitUndo(meshName string, undo []undoing, bound map[string]int) (kept []undoing, deferred bool) {
	per := map[string]int{}
	for _, u := range undo {
		per[u.router]++
	}
	allow := map[string]int{}
	for router, n := range per {
		total := bound[router]
		if router == "" || n <= MassUnbindMin || 2*n <= total {
			continue
		}
		allow[router] = max(MassUnbindMin, total/10)
		rc.Metrics.MassUnbindSlowed.Add(1)
		rc.Log.Warn("a pass would undo most of a router's bindings: undoing them in steps", "mesh", meshName, "router", router,
			"undo", n, "bound", total, "this pass", allow[router], "next in", MassUnbindPause, "reason", firstReason(undo, router))
	}
	if len(allow) == 0 {
		return undo, false
	}
	out := undo[:0:0]
	for _, u := range undo {
		if a, limited := allow[u.router]; limited {
			if a == 0 {
				deferred = true
				continue
			}
			allow[u.router] = a - 1
		}
		out = append(out, u)
	}
	return out, deferred
}

func firstReason(undo []undoing, router string) string {
	for _, u := range undo {
		if u.router == router {
			return u.reason + ": " + u.msg
		}
	}
	return ""
}

// undo undoes the bindings decided, each against the snapshot it was decided from. The
// first that finds the store changed (store.ErrConflict) stops the rest: the next pass,
// due at once (the time returned; zero when none is needed; MassUnbindPause on when some
// were deferred), decides again from what the store holds then - a pass never goes on
// acting on what it read before.
func (rc *Reconciler) undo(ctx context.Context, meshName string, undo []undoing, deferred bool) time.Time {
	var next time.Time
	if deferred {
		next = time.Now().Add(MassUnbindPause)
	}
	for _, u := range undo {
		err := unbind(ctx, rc.Store, u.ri.it, u.ri.r, u.binding, u.reason, u.msg, u.guards)
		if errors.Is(err, store.ErrConflict) {
			rc.Log.Info("the store changed since the pass read it: unbinding stops until the next pass", "mesh", meshName, "route", routing.RouteKey(u.ri.r))
			return time.Now()
		}
		if err != nil {
			rc.Log.Warn("cannot unbind route", "route", routing.RouteKey(u.ri.r), "error", err)
			continue
		}
		rc.Metrics.Rescheduled.Add(1)
		rc.Log.Info("route unbound to be scheduled again", "route", routing.RouteKey(u.ri.r), "reason", u.reason, "message", u.msg)
	}
	return next
}

// routerGuard is a check that router (mesh/name) is still as the pass read it (absent when
// it read none).
func (rc *Reconciler) routerGuard(meshName, name string) store.Write {
	return store.Write{Key: store.Key{Mesh: meshName, Type: mesh.KindRouter, Name: name}, Check: true, Expect: rc.routerVer[meshName+"/"+name]}
}
