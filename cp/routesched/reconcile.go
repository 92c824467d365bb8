package routesched

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// Reasons the reconciler writes into a route's status besides the admission ones.
const (
	ReasonRouterDeleted  = "RouterDeleted"
	ReasonNotSelected    = "RouterNoLongerSelects"
	ReasonNameChanged    = "NameChanged"
	ReasonBindingRemoved = "BindingRemoved"
	ReasonBindFailed     = "BindFailed"
	// ReasonDNSInUse: the route's router has the dns of another router, whose zone the
	// control plane's DNS serves: it takes no routes until its dns is its own.
	ReasonDNSInUse = "RouterDNSInUse"
	// ConditionDNS is the router condition (False, ReasonDNSInUse) of a router whose dns an
	// older router holds.
	ConditionDNS   = "DNS"
	defaultResync  = 10 * time.Second
	defaultBackoff = 200 * time.Millisecond
	maxBackoff     = 10 * time.Second
	debounce       = 50 * time.Millisecond
)

// Metrics are the reconciler's counters.
type Metrics struct {
	Scheduled   atomic.Uint64 // bindings made
	Rescheduled atomic.Uint64 // bindings removed to schedule again
	Passes      atomic.Uint64
	Pending     atomic.Int64 // routes not scheduled after the last pass
	// MassUnbindSlowed counts the passes that undid a router's bindings in steps (more than
	// half of them at once).
	MassUnbindSlowed atomic.Uint64
	mu               sync.Mutex
	failures         map[string]uint64 // by reason
}

// Failures is the count of scheduling failures by reason.
func (m *Metrics) Failures() map[string]uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]uint64{}
	for k, v := range m.failures {
		out[k] = v
	}
	return out
}

func (m *Metrics) fail(reason string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.failures == nil {
		m.failures = map[string]uint64{}
	}
	m.failures[reason]++
}

// Reconciler schedules routes; run it on the leader only (store.RunWhileLeader). Each pass
// reads routers, routes and bindings, keeps the bindings that still hold, removes the
// others (the route goes back to new, nothing stale left), schedules the new routes
// (oldest first), and writes each router's admission into its routes' status. A pass runs
// after every change (watched) and every Resync; a route that failed waits its backoff.
type Reconciler struct {
	Store store.Transactional
	// Strategy builds the strategy of each mesh's scheduler (nil: round-robin).
	Strategy func(*routing.Scheduler) routing.Strategy
	Resync   time.Duration
	Backoff  time.Duration
	Log      *slog.Logger
	Metrics  *Metrics
	// UserZones are the users' domains the operator gave (kuma-cp serve --dns-user-zone): a
	// user route's name lies in one of them or in a router's zone (routing.CheckUserName).
	UserZones []string

	scheds  map[string]*routing.Scheduler
	retries map[string]retry // route store key -> backoff
	cache   map[store.Key]cached
	// shadowed: routers (mesh/name) with another router's dns, and that router.
	shadowed map[string]string
	// zones: the routers of every mesh (not shadowed), their Mesh set: one DNS serves the
	// zones of every mesh.
	zones []*mesh.Router
	// names: each user DNS name bound in some mesh, held by its oldest bound route.
	names map[string]nameClaim
	// routerVer: the version read of each router (mesh/name), what unbinding is checked on.
	routerVer map[string]int64
}

// nameClaim is the route that holds a user DNS name across meshes, as read.
type nameClaim struct {
	mesh  string
	route *mesh.Route
	item  store.Item
}

// cached is a decoded resource at one version: a pass decodes only what changed.
type cached struct {
	version int64
	res     mesh.Resource
	err     error
}

// decode decodes a stored resource, from the cache when its version is unchanged. Routes
// get the store's creation time. The result must not be modified.
func (rc *Reconciler) decode(it store.Item) (mesh.Resource, error) {
	if c, ok := rc.cache[it.Key]; ok && c.version == it.Version {
		return c.res, c.err
	}
	var res mesh.Resource
	var err error
	if it.Type == mesh.KindRoute {
		var r *mesh.Route
		if r, err = DecodeRoute(it); err == nil {
			res = r
		}
	} else {
		var rs []mesh.Resource
		rs, err = mesh.Decode(it.Key.String(), it.Doc)
		if err == nil && len(rs) != 1 {
			err = fmt.Errorf("%s: want one resource, got %d", it.Key, len(rs))
		}
		if err == nil {
			res = rs[0]
		}
	}
	rc.cache[it.Key] = cached{it.Version, res, err}
	return res, err
}

type retry struct {
	at    time.Time
	delay time.Duration
}

// Run reconciles until ctx ends (leadership lost).
func (rc *Reconciler) Run(ctx context.Context) {
	if rc.Log == nil {
		rc.Log = slog.Default()
	}
	if rc.Metrics == nil {
		rc.Metrics = &Metrics{}
	}
	if rc.Resync <= 0 {
		rc.Resync = defaultResync
	}
	if rc.Backoff <= 0 {
		rc.Backoff = defaultBackoff
	}
	rc.scheds = map[string]*routing.Scheduler{}
	rc.retries = map[string]retry{}
	rc.cache = map[store.Key]cached{}
	for ctx.Err() == nil {
		rev, next, err := rc.Pass(ctx)
		if err != nil {
			rc.Log.Warn("route scheduling pass failed; retrying", "error", err)
			wait(ctx, time.Second)
			continue
		}
		rc.follow(ctx, rev, next)
	}
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

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

type routeItem struct {
	it store.Item
	r  *mesh.Route
}

// Pass reconciles once; it returns the store revision read and when the next retry is due.
func (rc *Reconciler) Pass(ctx context.Context) (int64, time.Time, error) {
	if rc.scheds == nil {
		rc.scheds, rc.retries = map[string]*routing.Scheduler{}, map[string]retry{}
	}
	if rc.cache == nil {
		rc.cache = map[store.Key]cached{}
	}
	if rc.Metrics == nil {
		rc.Metrics = &Metrics{}
	}
	if rc.Log == nil {
		rc.Log = slog.Default()
	}
	if rc.Backoff <= 0 {
		rc.Backoff = defaultBackoff
	}
	rc.Metrics.Passes.Add(1)
	routers, rev, err := listAll(ctx, rc.Store, mesh.KindRouter)
	if err != nil {
		return 0, time.Time{}, err
	}
	routes, _, err := listAll(ctx, rc.Store, mesh.KindRoute)
	if err != nil {
		return 0, time.Time{}, err
	}
	bindings, _, err := listAll(ctx, rc.Store, mesh.KindRouteBinding)
	if err != nil {
		return 0, time.Time{}, err
	}
	meshes := map[string]bool{}
	listed := map[store.Key]bool{}
	for _, l := range [][]store.Item{routers, routes, bindings} {
		for _, it := range l {
			meshes[it.Mesh] = true
			listed[it.Key] = true
		}
	}
	for k := range rc.cache {
		if !listed[k] {
			delete(rc.cache, k) // deleted from the store
		}
	}
	rc.shadowed = rc.shadowedRouters(routers)
	rc.routerVer = make(map[string]int64, len(routers))
	for _, it := range routers {
		rc.routerVer[it.Mesh+"/"+it.Name] = it.Version
	}
	rc.zones = rc.zones[:0]
	for _, it := range routers {
		if res, err := rc.decode(it); err == nil && rc.shadowed[it.Mesh+"/"+it.Name] == "" {
			if rt, ok := res.(*mesh.Router); ok {
				c := *rt // the cached one is shared
				c.Mesh = it.Mesh
				rc.zones = append(rc.zones, &c)
			}
		}
	}
	rc.names = rc.boundNames(routes, bindings)
	var next time.Time
	pending := int64(0)
	for _, m := range sortedKeys(meshes) {
		n, p := rc.passMesh(ctx, m, filter(routers, m), filter(routes, m), filter(bindings, m))
		pending += p
		if !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	rc.Metrics.Pending.Store(pending)
	rc.writeRouterStatus(ctx, routers, time.Now())
	return rev, next, ctx.Err()
}

func (rc *Reconciler) passMesh(ctx context.Context, meshName string, routerItems, routeItems, bindingItems []store.Item) (time.Time, int64) {
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
	bindings := map[string]*mesh.RouteBinding{}
	bindingAt := map[string]store.Item{}
	for _, it := range bindingItems {
		if res, err := rc.decode(it); err == nil {
			if b, ok := res.(*mesh.RouteBinding); ok {
				bindings[it.Name] = b
				bindingAt[it.Name] = it
			}
		}
	}
	var routes []routeItem
	for _, it := range routeItems {
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
	seen := map[string]bool{}
	var pending []routeItem
	var next time.Time
	// Keep the bindings that hold; undo the others (a router's mass undoing slowed).
	var undo []undoing
	boundTo := map[string]int{} // router -> routes bound to it in the store
	for _, ri := range routes {
		seen[ri.it.Name] = true
		b := bindings[ri.it.Name]
		if b != nil {
			boundTo[b.Router]++
		}
		reason, msg, guards := rc.check(s, meshName, ri.r, b)
		switch {
		case b != nil && reason == "":
			s.Bind(ri.r, b.Router)
		case b != nil || ri.r.PhaseOf() == mesh.PhaseScheduled:
			u := undoing{ri: ri, reason: reason, msg: msg, guards: guards}
			if b != nil {
				bi := bindingAt[ri.it.Name]
				u.router, u.binding = b.Router, &bi
			}
			undo = append(undo, u)
		default:
			pending = append(pending, ri)
		}
	}
	kept, deferred := rc.limitUndo(meshName, undo, boundTo)
	if n := rc.undo(ctx, meshName, kept, deferred); !n.IsZero() {
		next = n
	}
	for name, b := range bindings {
		if !seen[name] { // the route is gone
			if err := rc.Store.Delete(ctx, bindingKey(meshName, b.RouteNamespace, b.RouteName), store.Any); err != nil && !errors.Is(err, store.ErrNotFound) {
				rc.Log.Warn("cannot delete the binding of a deleted route", "binding", name, "error", err)
			}
		}
	}
	// Schedule the new routes, oldest first.
	now := time.Now()
	type decided struct {
		ri     routeItem
		router *mesh.Router
		dns    string
	}
	var todo []decided
	var left int64
	for _, ri := range pending {
		if rt, ok := rc.retries[ri.it.Key.String()]; ok && now.Before(rt.at) {
			left++
			if next.IsZero() || rt.at.Before(next) {
				next = rt.at
			}
			continue
		}
		var router *mesh.Router
		var err error
		if ue := routing.CheckUserName(ri.r, rc.UserZones, rc.zones); ue != nil {
			err = ue
		} else if fz, _ := rc.foreignZone(meshName, ri.r); fz != nil {
			err = fz
		} else {
			router, err = s.Schedule(ri.r)
		}
		var dns string
		if err == nil {
			if dns, err = routing.FinalDNS(ri.r, router); err != nil {
				s.Unbind(routing.RouteKey(ri.r))
			}
		}
		if err != nil {
			left++
			if n := rc.failed(ctx, ri, err); next.IsZero() || n.Before(next) {
				next = n
			}
			continue
		}
		todo = append(todo, decided{ri, router, dns})
	}
	// Admission per router, over the routes kept and the ones about to be bound.
	byRouter := map[string][]*mesh.Route{}
	for _, ri := range routes {
		if rt := s.BoundTo(routing.RouteKey(ri.r)); rt != "" {
			byRouter[rt] = append(byRouter[rt], ri.r)
		}
	}
	admission := map[string]routing.Admission{}
	for name, rs := range byRouter {
		maps.Copy(admission, routing.Admit(s.Router(name), rs))
	}
	for _, d := range todo {
		k := routing.RouteKey(d.ri.r)
		ing := ingressFor(d.router, d.ri.r, admission[k], nil, now)
		b := &mesh.RouteBinding{RouteNamespace: d.ri.r.Namespace, RouteName: d.ri.r.Name, Router: d.router.Name, DNS: d.dns}
		err := bind(ctx, rc.Store, meshName, b, Canonical(d.router), ing, &d.ri.it, []store.Write{rc.routerGuard(meshName, d.router.Name)})
		switch {
		case err == nil:
			rc.Metrics.Scheduled.Add(1)
			delete(rc.retries, d.ri.it.Key.String())
		case errors.Is(err, ErrBound):
			// made meanwhile (a previous leader's last write): the next pass reads it
		case errors.Is(err, store.ErrConflict):
			// the route or its router changed since the pass read them: the next pass
			// decides again, at once
			rc.Log.Debug("the store changed since the pass read it: binding again from the next pass", "route", k, "error", err)
			s.Unbind(k)
			left++
			next = now
		default:
			s.Unbind(k)
			left++
			if n := rc.failed(ctx, d.ri, &routing.Error{Reason: ReasonBindFailed, Message: err.Error()}); next.IsZero() || n.Before(next) {
				next = n
			}
		}
	}
	// Admission changes of routes already bound (displaced holders, freed hosts).
	for _, ri := range routes {
		k := routing.RouteKey(ri.r)
		rt := s.BoundTo(k)
		if rt == "" || ri.r.PhaseOf() != mesh.PhaseScheduled {
			continue
		}
		var old []mesh.RouteIngress
		if ri.r.Status != nil {
			old = ri.r.Status.Ingress
		}
		ing := ingressFor(s.Router(rt), ri.r, admission[k], old, now)
		if sameIngress(old, ing) && ri.r.Status.Reason == "" {
			continue
		}
		if err := SetStatus(ctx, rc.Store, ri.it, ri.r, "", "", ing); err != nil && !errors.Is(err, store.ErrConflict) {
			rc.Log.Warn("cannot write route admission", "route", k, "error", err)
		}
	}
	return next, left
}

// check says why binding b of r no longer holds ("" when it does, or there is none), and
// the keys that decision was read from besides the route and its binding (to check them
// unchanged when the binding is undone).
func (rc *Reconciler) check(s *routing.Scheduler, meshName string, r *mesh.Route, b *mesh.RouteBinding) (string, string, []store.Write) {
	if b == nil {
		if r.PhaseOf() == mesh.PhaseScheduled {
			return ReasonBindingRemoved, "the route's binding was removed", nil
		}
		return "", "", nil
	}
	bound := rc.routerGuard(meshName, b.Router)
	if err := routing.CheckUserName(r, rc.UserZones, rc.zones); err != nil {
		return err.Reason, err.Message, []store.Write{bound}
	}
	if err, guard := rc.foreignZone(meshName, r); err != nil {
		return err.Reason, err.Message, append(guard, bound)
	}
	if holder := rc.shadowed[meshName+"/"+b.Router]; holder != "" {
		hm, hn, _ := strings.Cut(holder, "/")
		return ReasonDNSInUse, fmt.Sprintf("router %s has the dns of router %s, which is older and whose zone the control plane's DNS serves", b.Router, holder),
			[]store.Write{bound, rc.routerGuard(hm, hn)}
	}
	router := s.Router(b.Router)
	if router == nil {
		return ReasonRouterDeleted, fmt.Sprintf("router %s was deleted", b.Router), []store.Write{bound}
	}
	if !routing.Matches(router, r) {
		return ReasonNotSelected, fmt.Sprintf("router %s no longer takes the route (its labels or namespace changed)", b.Router), []store.Write{bound}
	}
	if owner, err := routing.ZoneOwner(s.Routers(), r); err != nil {
		var e *routing.Error
		if errors.As(err, &e) {
			return e.Reason, e.Message, []store.Write{bound}
		}
		return ReasonNotSelected, err.Error(), []store.Write{bound}
	} else if owner != nil && owner.Name != b.Router {
		return ReasonNotSelected, fmt.Sprintf("host %s is in router %s's zone %s: only that router may serve it", r.Host, owner.Name, owner.DNS),
			[]store.Write{bound, rc.routerGuard(meshName, owner.Name)}
	}
	dns, err := routing.FinalDNS(r, router)
	if err != nil || dns != b.DNS {
		return ReasonNameChanged, fmt.Sprintf("the route's name is now %q, not %q (its host or DNS type changed)", dns, b.DNS), []store.Write{bound}
	}
	if r.Status == nil || r.Status.DNS != b.DNS || r.Status.Router != b.Router || r.PhaseOf() != mesh.PhaseScheduled {
		return ReasonNameChanged, "the route's status does not match its binding", nil
	}
	return "", "", nil
}

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
		if err := SetStatus(ctx, rc.Store, ri.it, ri.r, reason, msg, []mesh.RouteIngress{}); err != nil && !errors.Is(err, store.ErrConflict) {
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

// foreignZone refuses a user route of meshName whose name lies in the zone of a router of
// another mesh (routing.ZoneOwner over every mesh's routers): only that router may serve it;
// and one whose DNS name a route of another mesh holds (one DNS serves every mesh, and a
// name leads to one router). The guard is the key that decided it, as read.
func (rc *Reconciler) foreignZone(meshName string, r *mesh.Route) (*routing.Error, []store.Write) {
	if r.DNSTypeOf() != mesh.DNSTypeUser {
		return nil, nil
	}
	if c, ok := rc.names[userDNSName(r)]; ok && c.mesh != meshName {
		return &routing.Error{Reason: mesh.ReasonHostAlreadyClaimed, Message: fmt.Sprintf("the name %s is held by route %s of mesh %s (one DNS name leads to one router)", userDNSName(r), routing.RouteKey(c.route), c.mesh)},
			[]store.Write{{Key: c.item.Key, Check: true, Expect: c.item.Version}}
	}
	owner, _ := routing.ZoneOwner(rc.zones, r)
	if owner == nil || owner.Mesh == meshName {
		return nil, nil // none, or this mesh's scheduler's to decide
	}
	return &routing.Error{Reason: mesh.ReasonNoRouterMatches, Message: fmt.Sprintf("host %s is in router %s/%s's zone %s, of another mesh: only that router may serve it", r.Host, owner.Mesh, owner.Name, owner.DNS)},
		[]store.Write{rc.routerGuard(owner.Mesh, owner.Name)}
}

// userDNSName is the DNS name a user route claims: its host, or *.<domain> for a Subdomain
// wildcard (as the zones hold it).
func userDNSName(r *mesh.Route) string {
	h := strings.ToLower(strings.TrimSuffix(r.Host, "."))
	if i := strings.IndexByte(h, '.'); r.WildcardPolicyOf() == mesh.WildcardSubdomain && i > 0 {
		return "*" + h[i:]
	}
	return h
}

// boundNames are the user DNS names of the bound routes of every mesh, each held by its
// oldest route.
func (rc *Reconciler) boundNames(routes, bindings []store.Item) map[string]nameClaim {
	bound := map[store.Key]bool{}
	for _, it := range bindings {
		bound[store.Key{Mesh: it.Mesh, Type: mesh.KindRoute, Name: it.Name}] = true
	}
	out := map[string]nameClaim{}
	for _, it := range routes {
		if !bound[it.Key] {
			continue
		}
		res, err := rc.decode(it)
		r, ok := res.(*mesh.Route)
		if err != nil || !ok || r.DNSTypeOf() != mesh.DNSTypeUser {
			continue
		}
		name := userDNSName(r)
		if c, held := out[name]; !held || routing.Older(r, c.route) {
			out[name] = nameClaim{mesh: it.Mesh, route: r, item: it}
		}
	}
	return out
}

// shadowedRouters are the routers (mesh/name) whose dns another router already has, with
// that router: the oldest router with a dns holds it (the store's creation time, then mesh
// and name, as the control plane's DNS serves its zone: shardzones' order), so a router
// created later with the same dns - a shard copied and its dns left as it was - takes no
// routes and never takes the zone from the router serving it. Each newly shadowed router is
// logged once.
func (rc *Reconciler) shadowedRouters(items []store.Item) map[string]string {
	items = slices.Clone(items)
	slices.SortFunc(items, func(a, b store.Item) int {
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Mesh+"/"+a.Name, b.Mesh+"/"+b.Name))
	})
	first := map[string]string{} // dns -> mesh/name
	out := map[string]string{}
	for _, it := range items {
		res, err := rc.decode(it)
		rt, ok := res.(*mesh.Router)
		if err != nil || !ok {
			continue
		}
		key := it.Mesh + "/" + rt.Name
		zone := strings.ToLower(strings.TrimSuffix(rt.DNS, "."))
		if holder, taken := first[zone]; taken {
			out[key] = holder
			if rc.shadowed[key] != holder {
				rc.Log.Warn("router has the dns of an older router: it takes no routes until its dns is its own", "router", key, "dns", rt.DNS, "held by", holder)
			}
			continue
		}
		first[zone] = key
	}
	return out
}

// dnsCondition is the condition a router's status carries while an older router holds its
// dns (nil when it holds its own).
func dnsCondition(rt *mesh.Router, holder string, now time.Time) *mesh.RouteCondition {
	if holder == "" {
		return nil
	}
	return &mesh.RouteCondition{Type: ConditionDNS, Status: "False", Reason: ReasonDNSInUse, LastTransitionTime: now,
		Message: fmt.Sprintf("dns %s is held by router %s, which is older: this router takes no routes until its dns is its own", rt.DNS, holder)}
}

// writeRouterStatus writes each router's DNS condition where it changed: set on a router
// whose dns an older one holds, cleared once its dns is its own. The rest of the status (the
// replicas and their conditions, package routerstatus's) is kept as read, and that writer
// keeps this condition. Compared on the version read: a router changed meanwhile is written
// by the next pass.
func (rc *Reconciler) writeRouterStatus(ctx context.Context, items []store.Item, now time.Time) {
	for _, it := range items {
		res, err := rc.decode(it)
		rt, ok := res.(*mesh.Router)
		if err != nil || !ok {
			continue
		}
		want := dnsCondition(rt, rc.shadowed[it.Mesh+"/"+rt.Name], now)
		have := rt.Status.Condition(ConditionDNS)
		if want == nil && have == nil || want != nil && have != nil && sameCondition(*have, *want) {
			continue
		}
		c := *rt
		c.CreationTime = time.Time{}
		st := mesh.RouterStatus{}
		if rt.Status != nil {
			st = *rt.Status
		}
		st.Conditions = slices.DeleteFunc(slices.Clone(st.Conditions), func(c mesh.RouteCondition) bool { return c.Type == ConditionDNS })
		if want != nil {
			st.Conditions = append(st.Conditions, *want)
		}
		c.Status = &st
		if len(st.Conditions) == 0 && len(st.Replicas) == 0 && st.DesiredReplicas == 0 && st.ReadyReplicas == 0 {
			c.Status = nil
		}
		if _, err := rc.Store.Put(ctx, it.Key, Encode(&c), it.Version); err != nil && !errors.Is(err, store.ErrConflict) && !errors.Is(err, store.ErrNotFound) {
			rc.Log.Warn("cannot write router status", "router", it.Key.String(), "error", err)
		}
	}
}

func sameCondition(c, d mesh.RouteCondition) bool {
	return c.Type == d.Type && c.Status == d.Status && c.Reason == d.Reason && c.Message == d.Message
}

// listAll lists every resource of a kind in every mesh.
func listAll(ctx context.Context, st store.Store, kind string) ([]store.Item, int64, error) {
	items, _, rev, err := st.List(ctx, "", kind, "", 0)
	return items, rev, err
}

func filter(items []store.Item, meshName string) []store.Item {
	var out []store.Item
	for _, it := range items {
		if it.Mesh == meshName {
			out = append(out, it)
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
