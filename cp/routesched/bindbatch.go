package routesched

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// A pass binds its new routes in batches: many bindings a transaction, each as safe as one
// alone. A route's binding is created only where none is (the binding key absent), its
// status written only over the version the pass read, and its router checked unchanged; a
// batch lands whole or not at all. A batch whose comparison fails is split in halves until
// the routes that changed are found: the others are bound, the changed ones are left to the
// next pass, which reads them again.

// inFlight is how many batches a pass has in flight at once: etcd commits concurrent
// transactions together, one disk sync for several.
const inFlight = 4

// binding is one route a pass decided to bind: its writes, one unit of a batch.
type binding struct {
	ri     routeItem
	b      *mesh.RouteBinding
	route  *mesh.Route   // the route as written, with its store creation time
	writes []store.Write // the binding created, the route's status, its router's guard
	bytes  int           // its documents' size, as batching counts them
	err    error         // the outcome: nil (bound), ErrBound, store.ErrConflict or another
}

// newBinding is the writes that bind route ri onto router as dns, with the route's ingress
// on it; guard is the check that the router is as the pass read it.
func newBinding(meshName string, ri routeItem, router *mesh.Router, dns string, ingress []mesh.RouteIngress, guard store.Write) (*binding, error) {
	r := ri.r
	b := &mesh.RouteBinding{Meta: mesh.Meta{Mesh: meshName, Name: mesh.RouteKeyName(r.Namespace, r.Name)},
		RouteNamespace: r.Namespace, RouteName: r.Name, Router: router.Name, DNS: dns}
	if err := mesh.Validate(b); err != nil {
		return nil, err
	}
	c := *r // the decoded route is shared: a copy with the new status
	c.SetCreationTime(time.Time{})
	c.Status = &mesh.RouteStatus{Phase: mesh.PhaseScheduled, DNS: dns, Router: router.Name, RouterCanonicalHostname: Canonical(router), Ingress: ingress}
	bdoc, rdoc := Encode(b), Encode(&c)
	written := c
	written.SetCreationTime(ri.it.Created)
	return &binding{ri: ri, b: b, route: &written, bytes: len(bdoc) + len(rdoc), writes: []store.Write{
		{Key: bindingKey(meshName, r.Namespace, r.Name), Doc: bdoc},
		{Key: ri.it.Key, Doc: rdoc, Expect: ri.it.Version, Created: ri.it.Created},
		guard,
	}}, nil
}

// batches splits bindings into transactions within etcd's limits: each binding is two
// comparisons and two operations, and each router guarded one more comparison per batch.
func batches(bs []*binding) [][]*binding {
	var out [][]*binding
	var cur []*binding
	cmps, size := 0, 0
	guards := map[store.Key]bool{}
	for _, b := range bs {
		g := b.writes[2].Key
		add := 2
		if !guards[g] {
			add++
		}
		weight := b.bytes*4/3 + 512 // base64 in the envelope, keys and framing
		if len(cur) > 0 && (cmps+add > store.MaxTxnOps || size+weight > store.MaxTxnBytes) {
			out = append(out, cur)
			cur, cmps, size = nil, 0, 0
			clear(guards)
			add = 3
		}
		cur = append(cur, b)
		cmps += add
		size += weight
		guards[g] = true
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// bindAll writes bindings in batches, inFlight at a time, and sets each one's outcome.
func (rc *Reconciler) bindAll(ctx context.Context, bs []*binding) {
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for _, batch := range batches(bs) {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			rc.commit(ctx, batch)
		}()
	}
	wg.Wait()
}

// commit writes batch in one transaction. When a comparison fails, the halves are written
// apart, down to the routes that changed: a route alone that fails is ErrBound when its
// binding was made meanwhile, store.ErrConflict otherwise.
func (rc *Reconciler) commit(ctx context.Context, batch []*binding) {
	writes := make([]store.Write, 0, 3*len(batch))
	guarded := map[store.Key]bool{}
	for _, b := range batch {
		writes = append(writes, b.writes[:2]...)
		if g := b.writes[2]; !guarded[g.Key] {
			guarded[g.Key] = true
			writes = append(writes, g)
		}
	}
	err := rc.Store.Txn(ctx, writes...)
	if errors.Is(err, store.ErrConflict) && len(batch) > 1 {
		rc.commit(ctx, batch[:len(batch)/2])
		rc.commit(ctx, batch[len(batch)/2:])
		return
	}
	if errors.Is(err, store.ErrConflict) {
		if _, gerr := rc.Store.Get(ctx, batch[0].writes[0].Key); gerr == nil {
			err = fmt.Errorf("route %s/%s: %w", batch[0].b.RouteNamespace, batch[0].b.RouteName, ErrBound)
		}
	}
	for _, b := range batch {
		b.err = err
	}
}
