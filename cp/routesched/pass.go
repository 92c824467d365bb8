package routesched

import (
	"context"
	"errors"
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
// routers and the bindings kept, and which bindings were kept at which versions. A pass on
// a change visits only what the change can affect (dirty.go), unless the routers changed,
// or the pass listed the store: then it checks them all.
type meshState struct {
	s       *routing.Scheduler
	kept    map[string]kept // by route store name (name.namespace)
	routers string          // the routers' versions the kept bindings were checked with

	// What a pass on a watched change (passDirty) visits besides the routes and bindings
	// changed, and what it keeps up to date instead of computing it from every route; a pass
	// that checks every binding builds them again.
	adm       map[string]*routing.Admitter // router -> its routes' admission
	member    map[string]member            // route -> the admitter it is in
	loose     map[string]bool              // routes read and not kept: pending, undone, waiting
	unsettled map[string]bool              // kept routes not yet seen bound, or their admission not yet seen in their status
	users     map[string]bool              // user routes: checked at every pass (their names depend on other meshes)
	bound     map[string]string            // route -> the router of its binding, as read
	boundN    map[string]int               // router -> routes bound to it, as read
}

// member is where a route is in its mesh's admitters: its router and the version read.
type member struct {
	router string
	r      *mesh.Route
}

func newMeshState(strategy func(*routing.Scheduler) routing.Strategy) *meshState {
	return &meshState{s: routing.NewScheduler(strategy), kept: map[string]kept{}, adm: map[string]*routing.Admitter{},
		member: map[string]member{}, loose: map[string]bool{}, unsettled: map[string]bool{}, users: map[string]bool{},
		bound: map[string]string{}, boundN: map[string]int{}}
}

// resetIndexes forgets what passDirty keeps (a pass checking every binding builds it again).
func (ms *meshState) resetIndexes() {
	clear(ms.adm)
	clear(ms.member)
	clear(ms.loose)
	clear(ms.unsettled)
	clear(ms.users)
	clear(ms.bound)
	clear(ms.boundN)
}

// setBound records the router of route name's binding as read ("": none).
func (ms *meshState) setBound(name, router string) {
	if old, ok := ms.bound[name]; ok {
		if old == router {
			return
		}
		if ms.boundN[old]--; ms.boundN[old] <= 0 {
			delete(ms.boundN, old)
		}
		delete(ms.bound, name)
	}
	if router != "" {
		ms.bound[name] = router
		ms.boundN[router]++
	}
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
	routes  []routeItem // the routes the pass visits: every route, or (passDirty) those a change can affect
	gone    []string    // routes visited that the store no longer holds (or that do not decode)
	all     bool        // every binding checked again, every router's admission computed
	now     time.Time
	next    time.Time           // when a retry is due (zero: none)
	left    int64               // routes left unscheduled
	changed map[string][]string // router -> routes whose admission changed this pass (routing.RouteKey)
	// recompute: routers whose admission is computed again in full (routing.Admitter's
	// Recompute), checking what the admitters keep.
	recompute map[string]bool
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
	return rc.runMesh(ctx, rc.readMesh(meshName, routerItems, routeItems), bindingItems)
}

// runMesh runs a mesh's pass on the routes it visits; orphans are the bindings to delete
// when their route is gone.
func (rc *Reconciler) runMesh(ctx context.Context, p *meshPass, orphans []store.Item) (time.Time, int64) {
	pending := rc.keepOrUndo(ctx, p)
	rc.deleteOrphanBindings(ctx, p, orphans)
	todo := rc.decide(ctx, p, pending)
	p.admit()
	rc.bindDecided(ctx, p, todo)
	visited := rc.writeAdmission(ctx, p)
	p.settle(visited)
	return p.next, p.left
}

// readMesh starts a mesh's pass: its state (its scheduler set up from the routers again
// when they changed, or every binding is checked) and its routes.
func (rc *Reconciler) readMesh(meshName string, routerItems, routeItems []store.Item) *meshPass {
	ms := rc.meshes[meshName]
	if ms == nil {
		ms = newMeshState(rc.Strategy)
		rc.meshes[meshName] = ms
	}
	p := &meshPass{meshState: ms, mesh: meshName, now: time.Now()}
	if p.all = rc.checkAll || ms.routers != rc.routersRead; p.all {
		ms.s.Reset()
		clear(ms.kept)
		ms.resetIndexes()
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
// kept by an earlier pass, its route and itself unchanged (and the routers: else the pass
// checks everything), is kept without a check, unless a user route's name is now held in
// another mesh - the only thing else its check reads.
func (rc *Reconciler) keepOrUndo(ctx context.Context, p *meshPass) []routeItem {
	var pending []routeItem
	var undo []undoing
	for _, ri := range p.routes {
		name := ri.it.Name
		k, wasKept := p.kept[name]
		bk := store.Key{Mesh: p.mesh, Type: mesh.KindRouteBinding, Name: name}
		bi, hasBinding := rc.mirror.items[bk]
		routeEcho := rc.mirror.takeEcho(ri.it.Key, ri.it.Version)
		bindingEcho := hasBinding && rc.mirror.takeEcho(bk, bi.Version)
		if wasKept && routeEcho && hasBinding && (bi.Version == k.binding || bindingEcho) {
			// the route (and its binding) as this reconciler wrote them: still bound as checked
			k.route, k.binding = ri.it.Version, bi.Version
			p.kept[name] = k
		}
		if wasKept && k.route == ri.it.Version && hasBinding && k.binding == bi.Version && !rc.claimedElsewhere(p.mesh, ri.r) {
			p.setBound(name, k.router)
			continue
		}
		if wasKept {
			p.s.Unbind(k.key)
			delete(p.kept, name)
		} else if !p.all {
			p.s.Unbind(routing.RouteKey(ri.r)) // an earlier pass's decision, if any
		}
		b, bi := rc.bindingOf(ri.it)
		if b != nil {
			p.setBound(name, b.Router)
		} else {
			p.setBound(name, "")
		}
		reason, msg, guards := rc.check(p.s, p.mesh, ri.r, b)
		switch {
		case b != nil && reason == "":
			p.s.Bind(ri.r, b.Router)
			p.kept[name] = kept{key: routing.RouteKey(ri.r), router: b.Router, route: ri.it.Version, binding: bi.Version}
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
	kept, deferred := rc.limitUndo(p.mesh, undo, p.boundN)
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
// read (changed into one that does not decode). (A pass that checks every binding keeps
// none from before: it has none to forget.)
func (rc *Reconciler) forgetGone(p *meshPass) {
	for _, name := range p.gone {
		p.setBound(name, "")
		if k, ok := p.kept[name]; ok {
			p.s.Unbind(k.key)
			delete(p.kept, name)
		}
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
func (rc *Reconciler) bindDecided(ctx context.Context, p *meshPass, todo []decision) {
	bs := make([]*binding, 0, len(todo))
	for _, d := range todo {
		ing := ingressFor(d.router, d.ri.r, p.admission(d.router.Name, routing.RouteKey(d.ri.r)), nil, p.now)
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
			// kept, at versions the watch will show (absorbEcho), its status showing ad
			ad := p.admission(b.b.Router, k)
			p.kept[b.ri.it.Name] = kept{key: k, router: b.b.Router, route: -1, binding: -1, admission: ad, admitted: true}
			rc.mirror.wroteDecoded(b.writes[0].Key, b.writes[0].Doc, b.b)
			rc.mirror.wroteDecoded(b.writes[1].Key, b.writes[1].Doc, b.route)
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
