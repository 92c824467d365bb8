package routesched

import (
	"context"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// A pass on a watched change visits only what the change can affect, not every route: the
// routes and bindings changed, the routes of each mesh not kept (pending, undone, waiting
// a retry), those kept but not yet seen bound or with their admission in their status,
// and the user routes (whether a user name holds depends on the other meshes' routes). Its
// admission is computed again only for the routes the moves can affect (routing.Admitter).
// Its decisions are those of a pass that checks everything (TestIncrementalPassDecidesAsFull):
// a binding kept unchanged, its route unchanged and the routers unchanged, still holds; a
// change of a router, or a new mesh, is a pass that checks everything.

// canPassDirty says whether a pass on the changes dirty may visit only them: no router
// changed but in its status (the routers changed are read again) and every mesh changed has
// been read by a pass that checks everything.
func (rc *Reconciler) canPassDirty(dirty map[store.Key]struct{}) bool {
	routers := false
	for k := range dirty {
		if rc.meshes[k.Mesh] == nil {
			return false
		}
		routers = routers || k.Type == mesh.KindRouter
	}
	if routers {
		rc.routerItems = rc.mirror.routers()
		rc.readRouters(rc.routerItems)
	}
	for _, ms := range rc.meshes {
		if ms.routers != rc.routersRead {
			return false
		}
	}
	return len(rc.meshes) > 0
}

// passDirty is a pass on the routes and bindings in dirty (changed since the last pass)
// and what they can affect; and on slice (-1: none), the bindings kept checked again from
// scratch and the routers whose admission is computed again in full.
func (rc *Reconciler) passDirty(ctx context.Context, dirty map[store.Key]struct{}, slice int) (time.Time, error) {
	rc.defaults()
	rc.Metrics.Passes.Add(1)
	changed := map[string]map[string]bool{} // mesh -> route names
	add := func(k store.Key) {
		if changed[k.Mesh] == nil {
			changed[k.Mesh] = map[string]bool{}
		}
		changed[k.Mesh][k.Name] = true
	}
	for k := range rc.absorbEchoes(dirty) {
		if k.Type == mesh.KindRoute {
			rc.noteUserRoute(k)
		}
		add(k)
	}
	sliced := map[string]map[string]bool{} // mesh -> the routes of slice
	if slice >= 0 {
		for k := range rc.mirror.items {
			if k.Type == mesh.KindRoute && rc.meshes[k.Mesh] != nil && sliceOf(k.Name) == slice {
				add(k)
				if sliced[k.Mesh] == nil {
					sliced[k.Mesh] = map[string]bool{}
				}
				sliced[k.Mesh][k.Name] = true
			}
		}
	}
	rc.names = rc.boundNames()
	var next time.Time
	pending := int64(0)
	for _, name := range slices.Sorted(maps.Keys(rc.meshes)) {
		n, p := rc.passMeshDirty(ctx, name, changed[name], sliced[name], slice)
		pending += p
		if !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	rc.Metrics.Pending.Store(pending)
	rc.writeRouterStatus(ctx, rc.routerItems, time.Now())
	return next, ctx.Err()
}

// absorbEchoes takes out of dirty the routes this reconciler bound, as the watch shows them
// back - the route and its binding as it wrote them: they are kept at the versions shown,
// with no visit (after 10,000 bindings, the next pass has nothing of them to do) - and
// returns what is left.
func (rc *Reconciler) absorbEchoes(dirty map[store.Key]struct{}) map[store.Key]struct{} {
	var absorbed []store.Key
	for k := range dirty {
		if k.Type == mesh.KindRoute && rc.absorbEcho(k) {
			absorbed = append(absorbed, k, store.Key{Mesh: k.Mesh, Type: mesh.KindRouteBinding, Name: k.Name})
		}
	}
	for _, k := range absorbed {
		delete(dirty, k)
	}
	return dirty
}

// absorbEcho keeps route k, bound by this reconciler and not seen since, at the versions the
// watch shows of it and its binding, when both are as it wrote them and its admission is
// still the one it was written with.
func (rc *Reconciler) absorbEcho(k store.Key) bool {
	ms := rc.meshes[k.Mesh]
	kp, isKept := ms.kept[k.Name]
	bk := store.Key{Mesh: k.Mesh, Type: mesh.KindRouteBinding, Name: k.Name}
	it, held := rc.mirror.items[k]
	bi, bound := rc.mirror.items[bk]
	if !isKept || kp.route >= 0 || !held || !bound || !rc.mirror.isEcho(k, it.Version) || !rc.mirror.isEcho(bk, bi.Version) {
		return false
	}
	if a := ms.adm[kp.router]; a == nil || !kp.admitted {
		return false
	} else if ad, _ := a.Admission(kp.key); ad != kp.admission {
		return false // changed since it was bound: the visit writes it
	}
	rc.mirror.takeEcho(k, it.Version)
	rc.mirror.takeEcho(bk, bi.Version)
	kp.route, kp.binding = it.Version, bi.Version
	ms.kept[k.Name] = kp
	ms.setBound(k.Name, kp.router)
	setIf(ms.unsettled, k.Name, !kp.admitted)
	return true
}

// passMeshDirty is one mesh's part of passDirty: the routes changed (and those of the
// slice, sliced) and those it visits at every pass.
func (rc *Reconciler) passMeshDirty(ctx context.Context, meshName string, changed, sliced map[string]bool, slice int) (time.Time, int64) {
	ms := rc.meshes[meshName]
	visit := maps.Clone(changed)
	if visit == nil {
		visit = map[string]bool{}
	}
	recompute := ms.checkSlice(slice, sliced)
	for _, m := range []map[string]bool{ms.loose, ms.unsettled, ms.users} {
		maps.Copy(visit, m)
	}
	items := make([]store.Item, 0, len(visit))
	for name := range visit {
		if it, ok := rc.mirror.items[store.Key{Mesh: meshName, Type: mesh.KindRoute, Name: name}]; ok {
			items = append(items, it)
		}
	}
	p := &meshPass{meshState: ms, mesh: meshName, now: time.Now(), routes: rc.readRoutes(items), recompute: recompute}
	for _, ri := range p.routes {
		delete(visit, ri.it.Name)
	}
	var orphans []store.Item
	for name := range visit { // deleted, or no longer read
		p.gone = append(p.gone, name)
		if bi, ok := rc.mirror.items[store.Key{Mesh: meshName, Type: mesh.KindRouteBinding, Name: name}]; ok {
			orphans = append(orphans, bi)
		}
	}
	return rc.runMesh(ctx, p, orphans)
}

// checkSlice forgets the bindings kept of the routes of slice (0 to checkSlices-1; -1:
// none), so the pass checks them again from scratch; it returns the routers of slice (the
// i-th router, by name, in slice i), whose admission the pass computes again in full.
func (ms *meshState) checkSlice(slice int, routes map[string]bool) map[string]bool {
	if slice < 0 {
		return nil
	}
	for name := range routes {
		if k, ok := ms.kept[name]; ok {
			ms.s.Unbind(k.key)
			delete(ms.kept, name)
		}
	}
	recompute := map[string]bool{}
	for i, rt := range slices.Sorted(maps.Keys(ms.adm)) {
		if i%checkSlices == slice {
			recompute[rt] = true
		}
	}
	return recompute
}

// sliceOf is the slice (0 to checkSlices-1) route name is checked again in.
func sliceOf(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() % checkSlices)
}

// settle records, of the routes the pass looked at, those the next pass on a watched change
// visits whatever changed: the routes not kept (pending, undone, waiting a retry), those
// kept but not yet seen bound or with their admission in their status, and user routes.
func (p *meshPass) settle(routes []routeItem) {
	for _, ri := range routes {
		name := ri.it.Name
		k, isKept := p.kept[name]
		setIf(p.loose, name, !isKept)
		setIf(p.unsettled, name, isKept && (k.route < 0 || !k.admitted))
		setIf(p.users, name, ri.r.DNSTypeOf() == mesh.DNSTypeUser)
	}
	for _, name := range p.gone {
		delete(p.loose, name)
		delete(p.unsettled, name)
		delete(p.users, name)
	}
}

func setIf(m map[string]bool, k string, v bool) {
	if v {
		m[k] = true
	} else {
		delete(m, k)
	}
}
