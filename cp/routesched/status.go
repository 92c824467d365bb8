package routesched

import (
	"context"
	"errors"
	"time"

	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// failed records a scheduling failure: metrics, the reason in the route's status (when it
// changed), and the route's next attempt (doubling backoff).
func (rc *Reconciler) failed(ctx context.Context, ri routeItem, err error) time.Time {
	reason, msg := ReasonBindFailed, err.Error()
	var e *routing.Error
	if errors.As(err, &e) {
		reason, msg = e.Reason, e.Message
	}
	rc.Metrics.fail(reason)
	key := ri.it.Key.String()
	rt := rc.retries[key]
	rt.delay = min(max(rt.delay*2, rc.Backoff), maxBackoff)
	rt.at = time.Now().Add(rt.delay)
	rc.retries[key] = rt
	if st := ri.r.Status; st == nil || st.Reason != reason || st.Message != msg {
		doc, err := setStatus(ctx, rc.Store, ri.it, ri.r, reason, msg, []mesh.RouteIngress{})
		if err == nil {
			rc.mirror.wrote(ri.it.Key, doc) // its retry is due at rt.at: no pass needed before
		} else if !errors.Is(err, store.ErrConflict) {
			rc.Log.Warn("cannot write route status", "route", routing.RouteKey(ri.r), "error", err)
		}
	}
	rc.Log.Debug("route not scheduled yet", "route", routing.RouteKey(ri.r), "reason", reason, "message", msg, "retry in", rt.delay)
	return rt.at
}

// ingressFor is a route's status.ingress for its admission on router, keeping the
// transition time of an unchanged condition.
func ingressFor(router *mesh.Router, r *mesh.Route, ad routing.Admission, old []mesh.RouteIngress, now time.Time) []mesh.RouteIngress {
	ing := Ingress(router, r, ad, now)
	if len(old) == 1 && len(old[0].Conditions) == 1 && sameIngress(old, ing) {
		ing[0].Conditions[0].LastTransitionTime = old[0].Conditions[0].LastTransitionTime
	}
	return ing
}

func sameIngress(a, b []mesh.RouteIngress) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.Router != y.Router || x.Host != y.Host || x.RouterCanonicalHostname != y.RouterCanonicalHostname || x.WildcardPolicy != y.WildcardPolicy || len(x.Conditions) != len(y.Conditions) {
			return false
		}
		for j := range x.Conditions {
			c, d := x.Conditions[j], y.Conditions[j]
			if c.Type != d.Type || c.Status != d.Status || c.Reason != d.Reason || c.Message != d.Message {
				return false
			}
		}
	}
	return true
}
