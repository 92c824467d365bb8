// Package routesched is the route scheduler on the control plane's store: the binding path
// (a RouteBinding is created and applied to its route's status in one transaction, compared
// on the route's version), the reconciler that runs on the leader only (watches routers,
// routes and bindings, schedules new routes with package routing, re-schedules routes whose
// router went away or stopped selecting them, writes admission into route status), and the
// rules the write API applies to route status.
//
// The reconciler's files: reconcile.go (Run, Pass), follow.go (the watch loop), mirror.go
// (what the watch showed), relist.go (the listing beside the passes), pass.go (one mesh's
// pass, step by step), dirty.go (a pass on a change: what it visits), admission.go (each
// router's admission, computed again where a change can affect it), holds.go (whether a
// binding still holds), bindbatch.go (many bindings a transaction), unbind.go (undoing, and
// mass undoing slowed), routerdns.go (routers sharing a dns), status.go, decode.go,
// metrics.go.
package routesched

import (
	"context"
	"errors"
	"fmt"
	"github.com/kumadp/kuma-dp/authdns"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// ErrBound: the route already has a binding (another replica, or an earlier attempt, made
// it). It is never bound twice.
var ErrBound = errors.New("the route is already bound")

// Encode is a resource's document as stored (JSON, with its type): mesh.EncodeJSON.
func Encode(r mesh.Resource) []byte { return mesh.EncodeJSON(r) }

// DecodeRoute reads a stored route; its creation time is the store's (a creationTime in the
// document counts only when the store has none).
func DecodeRoute(it store.Item) (*mesh.Route, error) {
	rs, err := mesh.Decode(it.Key.String(), it.Doc)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		return nil, fmt.Errorf("%s: want one resource, got %d", it.Key, len(rs))
	}
	r, ok := rs[0].(*mesh.Route)
	if !ok {
		return nil, fmt.Errorf("%s: a %s, not a Route", it.Key, rs[0].Kind())
	}
	if !it.Created.IsZero() || r.CreationTime().IsZero() {
		// The store's: a route's age decides who owns a host, so a creationTime written in
		// the document (by anyone who may write a route) never counts.
		r.SetCreationTime(it.Created)
	}
	return r, nil
}

func routeKey(meshName, ns, name string) store.Key {
	return store.Key{Mesh: meshName, Type: mesh.KindRoute, Name: mesh.RouteKeyName(ns, name)}
}

func bindingKey(meshName, ns, name string) store.Key {
	return store.Key{Mesh: meshName, Type: mesh.KindRouteBinding, Name: mesh.RouteKeyName(ns, name)}
}

// Bind creates binding b and applies it to its route's status (phase scheduled, dns, router,
// the router's canonical name and ingress, when given) in one transaction compared on the
// route's version: a route changed meanwhile is read again and the binding retried; never
// half-applied. A route that already has a binding gives ErrBound. (The reconciler binds
// many routes a transaction, each compared the same way: bindbatch.go.)
func Bind(ctx context.Context, st store.Transactional, meshName string, b *mesh.RouteBinding, canonical string, ingress []mesh.RouteIngress) error {
	b.Name = mesh.RouteKeyName(b.RouteNamespace, b.RouteName)
	if b.Mesh == "" {
		b.Mesh = meshName
	}
	if err := mesh.Validate(b); err != nil {
		return err
	}
	rk, bk := routeKey(meshName, b.RouteNamespace, b.RouteName), bindingKey(meshName, b.RouteNamespace, b.RouteName)
	for attempt := 0; ; attempt++ {
		it, err := st.Get(ctx, rk)
		if err != nil {
			return fmt.Errorf("binding route %s/%s: %w", b.RouteNamespace, b.RouteName, err)
		}
		r, err := DecodeRoute(it)
		if err != nil {
			return err
		}
		r.SetCreationTime(time.Time{}) // the store keeps it
		r.Status = &mesh.RouteStatus{Phase: mesh.PhaseScheduled, DNS: b.DNS, Router: b.Router, RouterCanonicalHostname: canonical, Ingress: ingress}
		err = st.Txn(ctx, store.Write{Key: bk, Doc: Encode(b)}, store.Write{Key: rk, Doc: Encode(r), Expect: it.Version, Created: it.Created})
		if err == nil {
			return nil
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		if _, gerr := st.Get(ctx, bk); gerr == nil {
			return fmt.Errorf("route %s/%s: %w", b.RouteNamespace, b.RouteName, ErrBound)
		}
		if attempt >= 20 {
			return err
		}
	}
}

// unbind deletes a route's binding and puts it back to phase new, with reason and message
// saying why and nothing else of the old binding left (no stale router, dns or ingress), as
// decided from a snapshot: the route and its binding as read (binding nil: it had none),
// compared on the versions read and on guards - the other keys the decision was made from
// (store.Write Check) - in one transaction, never on a newer read. A route, binding or
// guarded key changed since gives store.ErrConflict and nothing is written: the next pass
// decides again from what the store holds then.
func unbind(ctx context.Context, st store.Transactional, route store.Item, r *mesh.Route, binding *store.Item, reason, message string, guards []store.Write) error {
	c := *r
	c.SetCreationTime(time.Time{})
	c.Status = &mesh.RouteStatus{Phase: mesh.PhaseNew, Reason: reason, Message: message}
	writes := append([]store.Write{{Key: route.Key, Doc: Encode(&c), Expect: route.Version, Created: route.Created}}, guards...)
	bk := bindingKey(route.Mesh, r.Namespace, r.Name)
	if binding != nil {
		writes = append(writes, store.Write{Key: bk, Delete: true, Expect: binding.Version})
	} else {
		writes = append(writes, store.Write{Key: bk, Check: true})
	}
	return st.Txn(ctx, writes...)
}

// setStatus writes a route's status fields other than phase and dns (the reason it is not
// scheduled, its admission), compared on version, and returns the document written; phase
// and dns are kept as stored.
func setStatus(ctx context.Context, st store.Store, it store.Item, r *mesh.Route, reason, message string, ingress []mesh.RouteIngress) ([]byte, error) {
	s := mesh.RouteStatus{}
	if r.Status != nil {
		s = *r.Status
	}
	s.Reason, s.Message = reason, message
	if ingress != nil {
		s.Ingress = ingress
	}
	c := *r
	c.SetCreationTime(time.Time{})
	c.Status = &s
	doc := Encode(&c)
	_, err := st.Put(ctx, it.Key, doc, it.Version)
	return doc, err
}

// Canonical is the name a user's own domain points its CNAME at for router: the one the
// control plane's DNS serves (router-<name>.<dns>, answered by the shard's wildcard; the
// zone's apex is not covered by its own wildcard, RFC 4592).
func Canonical(router *mesh.Router) string {
	return strings.TrimSuffix(authdns.CanonicalName(router.Name, router.DNS), ".")
}

// Ingress is route r's admission on router, as status.ingress shows it.
func Ingress(router *mesh.Router, r *mesh.Route, ad routing.Admission, now time.Time) []mesh.RouteIngress {
	c := mesh.RouteCondition{Type: "Admitted", Status: "True", LastTransitionTime: now}
	if !ad.Admitted {
		c.Status, c.Reason, c.Message = "False", ad.Reason, ad.Message
	}
	return []mesh.RouteIngress{{Router: router.Name, Host: ad.Host, RouterCanonicalHostname: Canonical(router),
		WildcardPolicy: r.WildcardPolicyOf(), Conditions: []mesh.RouteCondition{c}}}
}
