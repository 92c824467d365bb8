package routesched

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

type routeItem struct {
	it store.Item
	r  *mesh.Route
}

// meshPass is one mesh's part of a pass: what it read, and when the next pass is due.
type meshPass struct {
	mesh      string
	s         *routing.Scheduler
	routes    []routeItem // oldest first
	bindings  map[string]*mesh.RouteBinding
	bindingAt map[string]store.Item // each binding as read, by route key name
	now       time.Time
	next      time.Time // when a retry is due (zero: none)
	left      int64     // routes left unscheduled
}

// due moves the next pass to t when t is sooner (t zero: no change).
func (p *meshPass) due(t time.Time) {
	if !t.IsZero() && (p.next.IsZero() || t.Before(p.next)) {
		p.next = t
	}
}

// passMesh reconciles one mesh: the bindings that no longer hold are undone (and those of
// deleted routes removed), the new routes are scheduled and bound, and each router's
// admission is written into its routes' status. It returns when the next pass is due and
// how many routes are left unscheduled.
func (rc *Reconciler) passMesh(ctx context.Context, meshName string, routerItems, routeItems, bindingItems []store.Item) (time.Time, int64) {
	p := rc.readMesh(meshName, routerItems, routeItems, bindingItems)
	pending := rc.keepOrUndo(ctx, p)
	rc.deleteOrphanBindings(ctx, p)
	todo := rc.decide(ctx, p, pending)
	admission := p.admission()
	rc.bindDecided(ctx, p, todo, admission)
	rc.writeAdmission(ctx, p, admission)
	return p.next, p.left
}

// readMesh decodes the mesh's routers (into its scheduler, reset), bindings and routes
// (oldest first).
func (rc *Reconciler) readMesh(meshName string, routerItems, routeItems, bindingItems []store.Item) *meshPass {
	s := rc.scheds[meshName]
	if s == nil {
		s = routing.NewScheduler(rc.Strategy)
		rc.scheds[meshName] = s
	}
	s.Reset()
	for _, it := range routerItems {
		res, err := rc.decode(it)
		if err != nil {
			rc.Log.Error("a stored router does not decode; ignored", "router", it.Key.String(), "error", err)
			continue
		}
		if rt, ok := res.(*mesh.Router); ok && rc.shadowed[meshName+"/"+rt.Name] == "" {
			s.SetRouter(rt)
		}
	}
	p := &meshPass{mesh: meshName, s: s, bindings: map[string]*mesh.RouteBinding{}, bindingAt: map[string]store.Item{}, now: time.Now()}
	for _, it := range bindingItems {
		if res, err := rc.decode(it); err == nil {
			if b, ok := res.(*mesh.RouteBinding); ok {
				p.bindings[it.Name], p.bindingAt[it.Name] = b, it
			}
		}
	}
	p.routes = rc.readRoutes(routeItems)
	return p
}

// readRoutes decodes routes, oldest first; one that does not decode, or is not stored under
// its name.namespace, is logged and left alone.
func (rc *Reconciler) readRoutes(items []store.Item) []routeItem {
	routes := make([]routeItem, 0, len(items))
	for _, it := range items {
		res, err := rc.decode(it)
		if err != nil {
			rc.Log.Error("a stored route does not decode; ignored", "route", it.Key.String(), "error", err)
			continue
		}
		if r, ok := res.(*mesh.Route); ok {
			if want := mesh.RouteKeyName(r.Namespace, r.Name); it.Name != want {
				// its binding and every write of the binding path name it so
				rc.Log.Error("a stored route is not under its name.namespace; ignored", "route", it.Key.String(), "want", want)
				continue
			}
			routes = append(routes, routeItem{it, r})
		}
	}
	slices.SortFunc(routes, func(a, b routeItem) int {
		if routing.Older(a.r, b.r) {
			return -1
		}
		if routing.Older(b.r, a.r) {
			return 1
		}
		return 0
	})
	return routes
}

// keepOrUndo keeps in the scheduler the bindings that hold and undoes the others (a
// router's mass undoing slowed); it returns the routes to schedule.
func (rc *Reconciler) keepOrUndo(ctx context.Context, p *meshPass) []routeItem {
	var pending []routeItem
	var undo []undoing
	boundTo := map[string]int{} // router -> routes bound to it in the store
	for _, ri := range p.routes {
		b := p.bindings[ri.it.Name]
		if b != nil {
			boundTo[b.Router]++
		}
		reason, msg, guards := rc.check(p.s, p.mesh, ri.r, b)
		switch {
		case b != nil && reason == "":
			p.s.Bind(ri.r, b.Router)
		case b != nil || ri.r.PhaseOf() == mesh.PhaseScheduled:
			u := undoing{ri: ri, reason: reason, msg: msg, guards: guards}
			if b != nil {
				bi := p.bindingAt[ri.it.Name]
				u.router, u.binding = b.Router, &bi
			}
			undo = append(undo, u)
		default:
			pending = append(pending, ri)
		}
	}
	kept, deferred := rc.limitUndo(p.mesh, undo, boundTo)
	p.due(rc.undo(ctx, p.mesh, kept, deferred))
	return pending
}

// deleteOrphanBindings removes the bindings whose route is gone.
func (rc *Reconciler) deleteOrphanBindings(ctx context.Context, p *meshPass) {
	if len(p.bindings) == 0 {
		return
	}
	routes := make(map[string]bool, len(p.routes))
	for _, ri := range p.routes {
		routes[ri.it.Name] = true
	}
	for name, b := range p.bindings {
		if routes[name] {
			continue
		}
		if err := rc.Store.Delete(ctx, bindingKey(p.mesh, b.RouteNamespace, b.RouteName), store.Any); err != nil && !errors.Is(err, store.ErrNotFound) {
			rc.Log.Warn("cannot delete the binding of a deleted route", "binding", name, "error", err)
		}
	}
}

// decision is a new route's router and final name, as scheduled.
type decision struct {
	ri     routeItem
	router *mesh.Router
	dns    string
}

// decide schedules the pending routes, oldest first (those whose retry is not due yet
// wait); a route that cannot be scheduled gets its reason in its status and a backoff.
func (rc *Reconciler) decide(ctx context.Context, p *meshPass, pending []routeItem) []decision {
	var todo []decision
	for _, ri := range pending {
		if rt, ok := rc.retries[ri.it.Key.String()]; ok && p.now.Before(rt.at) {
			p.left++
			p.due(rt.at)
			continue
		}
		router, dns, err := rc.schedule(p, ri.r)
		if err != nil {
			p.left++
			p.due(rc.failed(ctx, ri, err))
			continue
		}
		todo = append(todo, decision{ri, router, dns})
	}
	return todo
}

// schedule picks route r's router (kept in the scheduler) and final name.
func (rc *Reconciler) schedule(p *meshPass, r *mesh.Route) (*mesh.Router, string, error) {
	if err := routing.CheckUserName(r, rc.UserZones, rc.zones); err != nil {
		return nil, "", err
	}
	if err, _ := rc.foreignZone(p.mesh, r); err != nil {
		return nil, "", err
	}
	router, err := p.s.Schedule(r)
	if err != nil {
		return nil, "", err
	}
	dns, err := routing.FinalDNS(r, router)
	if err != nil {
		p.s.Unbind(routing.RouteKey(r))
		return nil, "", err
	}
	return router, dns, nil
}

// admission is each router's admission over the routes kept and the ones about to be bound.
func (p *meshPass) admission() map[string]routing.Admission {
	byRouter := map[string][]*mesh.Route{}
	for _, ri := range p.routes {
		if rt := p.s.BoundTo(routing.RouteKey(ri.r)); rt != "" {
			byRouter[rt] = append(byRouter[rt], ri.r)
		}
	}
	admission := map[string]routing.Admission{}
	for name, rs := range byRouter {
		maps.Copy(admission, routing.Admit(p.s.Router(name), rs))
	}
	return admission
}

// bindDecided binds the decided routes (in batches) and takes back from the scheduler
// those that did not land: a route or router changed since the pass read it is decided
// again by the next pass, at once; another failure waits its backoff.
func (rc *Reconciler) bindDecided(ctx context.Context, p *meshPass, todo []decision, admission map[string]routing.Admission) {
	bs := make([]*binding, 0, len(todo))
	for _, d := range todo {
		ing := ingressFor(d.router, d.ri.r, admission[routing.RouteKey(d.ri.r)], nil, p.now)
		b, err := newBinding(p.mesh, d.ri, d.router, d.dns, ing, rc.routerGuard(p.mesh, d.router.Name))
		if err != nil {
			b = &binding{ri: d.ri, err: err}
		}
		bs = append(bs, b)
	}
	rc.bindAll(ctx, slices.DeleteFunc(slices.Clone(bs), func(b *binding) bool { return b.err != nil }))
	for _, b := range bs {
		k := routing.RouteKey(b.ri.r)
		switch {
		case b.err == nil:
			rc.Metrics.Scheduled.Add(1)
			delete(rc.retries, b.ri.it.Key.String())
		case errors.Is(b.err, ErrBound):
			// made meanwhile (a previous leader's last write): the next pass reads it
		case errors.Is(b.err, store.ErrConflict):
			rc.Log.Debug("the store changed since the pass read it: binding again from the next pass", "route", k, "error", b.err)
			p.s.Unbind(k)
			p.left++
			p.due(p.now)
		default:
			p.s.Unbind(k)
			p.left++
			p.due(rc.failed(ctx, b.ri, &routing.Error{Reason: ReasonBindFailed, Message: b.err.Error()}))
		}
	}
}

// writeAdmission writes the admission changes of routes already bound (displaced holders,
// freed hosts).
func (rc *Reconciler) writeAdmission(ctx context.Context, p *meshPass, admission map[string]routing.Admission) {
	for _, ri := range p.routes {
		k := routing.RouteKey(ri.r)
		rt := p.s.BoundTo(k)
		if rt == "" || ri.r.PhaseOf() != mesh.PhaseScheduled {
			continue
		}
		var old []mesh.RouteIngress
		if ri.r.Status != nil {
			old = ri.r.Status.Ingress
		}
		ing := ingressFor(p.s.Router(rt), ri.r, admission[k], old, p.now)
		if sameIngress(old, ing) && ri.r.Status.Reason == "" {
			continue
		}
		if err := SetStatus(ctx, rc.Store, ri.it, ri.r, "", "", ing); err != nil && !errors.Is(err, store.ErrConflict) {
			rc.Log.Warn("cannot write route admission", "route", k, "error", err)
		}
	}
}
