package routesched

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

type routeItem struct {
	it store.Item
	r  *mesh.Route
}

// meshState is what a mesh's passes keep from one to the next: its scheduler, holding the
// routers and the bindings kept, and which bindings were kept at which versions. A pass
// checks again only the routes whose route or binding changed since (and every user
// route: whether its name holds depends on the other meshes' routes), unless the routers
// changed, or the pass listed the store or is the one every Resync: then it checks them all.
type meshState struct {
	s       *routing.Scheduler
	kept    map[string]kept // by route store name (name.namespace)
	routers string          // the routers' versions the kept bindings were checked with
}

// kept is a binding a pass kept: the route and binding versions it checked, and the
// admission its status was last found or written to show (admitted false: none yet).
type kept struct {
	key            string // routing.RouteKey
	router         string
	route, binding int64
	admission      routing.Admission
	admitted       bool
}

// meshPass is one mesh's part of a pass: what it read, and when the next pass is due.
type meshPass struct {
	*meshState
	mesh    string
	routes  []routeItem
	touched map[string]bool // routers whose routes changed: their admission is computed again
	all     bool            // every binding checked again, every router's admission computed
	now     time.Time
	next    time.Time // when a retry is due (zero: none)
	left    int64     // routes left unscheduled
}

// due moves the next pass to t when t is sooner (t zero: no change).
func (p *meshPass) due(t time.Time) {
	if !t.IsZero() && (p.next.IsZero() || t.Before(p.next)) {
		p.next = t
	}
}

// touch marks router's admission to be computed again.
func (p *meshPass) touch(router string) {
	if router != "" {
		p.touched[router] = true
	}
}

// passMesh reconciles one mesh: the bindings that no longer hold are undone (and those of
// deleted routes removed), the new routes are scheduled and bound, and each router's
// admission is written into its routes' status. It returns when the next pass is due and
// how many routes are left unscheduled.
func (rc *Reconciler) passMesh(ctx context.Context, meshName string, routerItems, routeItems, bindingItems []store.Item) (time.Time, int64) {
	p := rc.readMesh(meshName, routerItems, routeItems)
	pending := rc.keepOrUndo(ctx, p)
	rc.deleteOrphanBindings(ctx, p, bindingItems)
	todo := rc.decide(ctx, p, pending)
	admission := p.admission()
	rc.bindDecided(ctx, p, todo, admission)
	rc.writeAdmission(ctx, p, admission)
	return p.next, p.left
}

// readMesh starts a mesh's pass: its state (its scheduler set up from the routers again
// when they changed, or every binding is checked) and its routes.
func (rc *Reconciler) readMesh(meshName string, routerItems, routeItems []store.Item) *meshPass {
	ms := rc.meshes[meshName]
	if ms == nil {
		ms = &meshState{s: routing.NewScheduler(rc.Strategy), kept: map[string]kept{}}
		rc.meshes[meshName] = ms
	}
	p := &meshPass{meshState: ms, mesh: meshName, touched: map[string]bool{}, now: time.Now()}
	if p.all = rc.checkAll || ms.routers != rc.routersRead; p.all {
		ms.s.Reset()
		clear(ms.kept)
		ms.routers = rc.routersRead
		for _, it := range routerItems {
			res, err := rc.decode(it)
			if err != nil {
				rc.Log.Error("a stored router does not decode; ignored", "router", it.Key.String(), "error", err)
				continue
			}
			if rt, ok := res.(*mesh.Router); ok && rc.shadowed[meshName+"/"+rt.Name] == "" {
				ms.s.SetRouter(rt)
			}
		}
	}
	p.routes = rc.readRoutes(routeItems)
	return p
}

// readRoutes decodes routes; one that does not decode, or is not stored under its
// name.namespace, is logged and left alone.
func (rc *Reconciler) readRoutes(items []store.Item) []routeItem {
	routes := make([]routeItem, 0, len(items))
	for _, it := range items {
		res, err := rc.decode(it)
		if err != nil {
			rc.Log.Error("a stored route does not decode; ignored", "route", it.Key.String(), "error", err)
			continue
		}
		if r, ok := res.(*mesh.Route); ok {
			if !storedAs(it.Name, r) {
				// its binding and every write of the binding path name it so
				rc.Log.Error("a stored route is not under its name.namespace; ignored", "route", it.Key.String(), "want", mesh.RouteKeyName(r.Namespace, r.Name))
				continue
			}
			routes = append(routes, routeItem{it, r})
		}
	}
	return routes
}

// storedAs says whether name is r's store name (mesh.RouteKeyName), without building it.
func storedAs(name string, r *mesh.Route) bool {
	return len(name) == len(r.Name)+1+len(r.Namespace) && strings.HasPrefix(name, r.Name) && name[len(r.Name)] == '.' && strings.HasSuffix(name, r.Namespace)
}

// bindingOf is the binding of a route as read (its key is the route's store name).
func (rc *Reconciler) bindingOf(it store.Item) (*mesh.RouteBinding, store.Item) {
	bi, ok := rc.mirror.items[store.Key{Mesh: it.Mesh, Type: mesh.KindRouteBinding, Name: it.Name}]
	if !ok {
		return nil, store.Item{}
	}
	res, err := rc.decode(bi)
	b, _ := res.(*mesh.RouteBinding)
	if err != nil || b == nil {
		return nil, store.Item{}
	}
	return b, bi
}

// keepOrUndo keeps in the scheduler the bindings that hold and undoes the others (a
// router's mass undoing slowed); it returns the routes to schedule, oldest first. A binding
// kept by an earlier pass, its route and itself unchanged, is kept without a check.
func (rc *Reconciler) keepOrUndo(ctx context.Context, p *meshPass) []routeItem {
	var pending []routeItem
	var undo []undoing
	boundTo := map[string]int{} // router -> routes bound to it in the store
	for _, ri := range p.routes {
		name := ri.it.Name
		k, wasKept := p.kept[name]
		bi, hasBinding := rc.mirror.items[store.Key{Mesh: p.mesh, Type: mesh.KindRouteBinding, Name: name}]
		if wasKept && k.route == ri.it.Version && hasBinding && k.binding == bi.Version && ri.r.DNSTypeOf() != mesh.DNSTypeUser {
			boundTo[k.router]++
			continue
		}
		if wasKept {
			p.s.Unbind(k.key)
			delete(p.kept, name)
			p.touch(k.router)
		} else if !p.all {
			p.s.Unbind(routing.RouteKey(ri.r)) // an earlier pass's decision, if any
		}
		b, bi := rc.bindingOf(ri.it)
		if b != nil {
			boundTo[b.Router]++
		}
		reason, msg, guards := rc.check(p.s, p.mesh, ri.r, b)
		switch {
		case b != nil && reason == "":
			p.s.Bind(ri.r, b.Router)
			p.kept[name] = kept{key: routing.RouteKey(ri.r), router: b.Router, route: ri.it.Version, binding: bi.Version}
			p.touch(b.Router)
		case b != nil || ri.r.PhaseOf() == mesh.PhaseScheduled:
			u := undoing{ri: ri, reason: reason, msg: msg, guards: guards}
			if b != nil {
				u.router, u.binding = b.Router, &bi
			}
			undo = append(undo, u)
		default:
			pending = append(pending, ri)
		}
	}
	rc.forgetGone(p)
	slices.SortFunc(undo, func(a, b undoing) int { return cmpAge(a.ri, b.ri) })
	slices.SortFunc(pending, cmpAge)
	kept, deferred := rc.limitUndo(p.mesh, undo, boundTo)
	p.due(rc.undo(ctx, p.mesh, kept, deferred))
	return pending
}

// cmpAge orders routes oldest first (routing.Older).
func cmpAge(a, b routeItem) int {
	if routing.Older(a.r, b.r) {
		return -1
	}
	if routing.Older(b.r, a.r) {
		return 1
	}
	return 0
}

// forgetGone takes out of the scheduler the bindings kept of routes deleted or no longer
// read (changed into one that does not decode).
func (rc *Reconciler) forgetGone(p *meshPass) {
	for name, k := range p.kept {
		if it, ok := rc.mirror.items[store.Key{Mesh: p.mesh, Type: mesh.KindRoute, Name: name}]; ok && it.Version == k.route {
			continue
		}
		p.s.Unbind(k.key)
		delete(p.kept, name)
		p.touch(k.router)
	}
}

// deleteOrphanBindings removes the bindings whose route is gone (or is no longer read).
func (rc *Reconciler) deleteOrphanBindings(ctx context.Context, p *meshPass, bindings []store.Item) {
	for _, it := range bindings {
		if _, ok := p.kept[it.Name]; ok {
			continue // its route was read this pass
		}
		if rt, ok := rc.mirror.items[store.Key{Mesh: p.mesh, Type: mesh.KindRoute, Name: it.Name}]; ok {
			if res, err := rc.decode(rt); err == nil {
				if r, ok := res.(*mesh.Route); ok && storedAs(rt.Name, r) {
					continue
				}
			}
		}
		if err := rc.Store.Delete(ctx, it.Key, store.Any); err != nil && !errors.Is(err, store.ErrNotFound) {
			rc.Log.Warn("cannot delete the binding of a deleted route", "binding", it.Name, "error", err)
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
		p.touch(router.Name) // before the admission is computed
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

// admission is the admission of the routes of each router touched (every router when the
// pass checked every binding), over the routes kept and the ones about to be bound.
func (p *meshPass) admission() map[string]routing.Admission {
	byRouter := map[string][]*mesh.Route{}
	for _, ri := range p.routes {
		if rt := p.routerOf(ri); rt != "" && (p.all || p.touched[rt]) {
			byRouter[rt] = append(byRouter[rt], ri.r)
		}
	}
	admission := map[string]routing.Admission{}
	for name, rs := range byRouter {
		maps.Copy(admission, routing.Admit(p.s.Router(name), rs))
	}
	return admission
}

// routerOf is the router a route is bound to in the scheduler ("" when none).
func (p *meshPass) routerOf(ri routeItem) string {
	if k, ok := p.kept[ri.it.Name]; ok {
		return k.router
	}
	return p.s.BoundTo(routing.RouteKey(ri.r))
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
			// kept, at versions the next pass will not find: it checks the binding then
			p.kept[b.ri.it.Name] = kept{key: k, router: b.b.Router, route: -1, binding: -1}
			rc.mirror.wrote(b.writes[0].Key, b.writes[0].Doc)
			rc.mirror.wrote(b.writes[1].Key, b.writes[1].Doc)
			delete(rc.retries, b.ri.it.Key.String())
		case errors.Is(b.err, ErrBound):
			// made meanwhile (a previous leader's last write): the next pass reads it
			p.s.Unbind(k)
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
// freed hosts) on the routers touched. A route kept unchanged whose admission is the one its
// status was found to show is passed over.
func (rc *Reconciler) writeAdmission(ctx context.Context, p *meshPass, admission map[string]routing.Admission) {
	for _, ri := range p.routes {
		kp, isKept := p.kept[ri.it.Name]
		if !isKept || (!p.all && !p.touched[kp.router]) || ri.r.PhaseOf() != mesh.PhaseScheduled {
			continue // (a route bound by this pass is written with its admission)
		}
		ad := admission[kp.key]
		if kp.admitted && kp.admission == ad {
			continue
		}
		var old []mesh.RouteIngress
		if ri.r.Status != nil {
			old = ri.r.Status.Ingress
		}
		ing := ingressFor(p.s.Router(kp.router), ri.r, ad, old, p.now)
		if !sameIngress(old, ing) || ri.r.Status.Reason != "" {
			doc, err := setStatus(ctx, rc.Store, ri.it, ri.r, "", "", ing)
			if err == nil {
				rc.mirror.wrote(ri.it.Key, doc)
			} else if !errors.Is(err, store.ErrConflict) {
				rc.Log.Warn("cannot write route admission", "route", kp.key, "error", err)
			}
			continue
		}
		kp.admission, kp.admitted = ad, true
		p.kept[ri.it.Name] = kp
	}
}
