package routesched

import (
	"context"
	"log/slog"
	"sort"
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
