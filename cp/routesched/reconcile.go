package routesched

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
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
	debounce       = 20 * time.Millisecond
)

// Reconciler schedules routes; run it on the leader only (store.RunWhileLeader). Each pass
// reads routers, routes and bindings, keeps the bindings that still hold, removes the
// others (the route goes back to new, nothing stale left), schedules the new routes
// (oldest first), and writes each router's admission into its routes' status. A pass runs
// after every change (watched) and every tenth of a Resync (checking a slice of the routes
// again: every route every 10 Resyncs); a route that failed waits its backoff.
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

	meshes  map[string]*meshState
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
	// mirror: what the last listing pass read, as the watch changed it since.
	mirror *mirror
	// checkAll: the pass checks every binding again (it runs on a listing of the store, or
	// a router changed).
	checkAll bool
	// routersRead: every router but its status, as this pass read them (a mesh's kept
	// bindings are checked again when they changed: a binding's check reads the routers of
	// every mesh).
	routersRead string
	// routerItems: the routers the last pass that listed them read (a pass on a watched
	// change that changed no router reads the same).
	routerItems []store.Item
	// userRoutes: the user routes of every mesh (their names are claimed across meshes).
	userRoutes map[store.Key]bool
	// lastPass: when the last pass on the mirror ended (a change after a quiet spell is
	// passed on at once).
	lastPass time.Time
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
	rc.meshes = map[string]*meshState{}
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

// Pass reconciles once, from the store as listed now; it returns the store revision read
// and when the next retry is due. The passes that follow it on the leader (Run) read what
// it listed as the watch has changed it since.
func (rc *Reconciler) Pass(ctx context.Context) (int64, time.Time, error) {
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
	rc.mirror = newMirror(routers, routes, bindings)
	rc.checkAll = true
	rc.forgetDeleted(routers, routes, bindings)
	next, err := rc.pass(ctx, routers, routes, bindings)
	rc.checkAll = false
	return rev, next, err
}

// pass reconciles once from the routers, routes and bindings read.
func (rc *Reconciler) pass(ctx context.Context, routers, routes, bindings []store.Item) (time.Time, error) {
	rc.defaults()
	rc.Metrics.Passes.Add(1)
	rc.readRouters(routers)
	rc.routerItems = routers
	rc.readUserRoutes(routes)
	rc.names = rc.boundNames()
	var next time.Time
	pending := int64(0)
	seen := map[string]bool{}
	for _, m := range byMesh(routers, routes, bindings) {
		seen[m.name] = true
		n, p := rc.passMesh(ctx, m.name, m.items[0], m.items[1], m.items[2])
		pending += p
		if !n.IsZero() && (next.IsZero() || n.Before(next)) {
			next = n
		}
	}
	for name := range rc.meshes {
		if !seen[name] { // it holds nothing now: its state read from nothing
			rc.passMesh(ctx, name, nil, nil, nil)
		}
	}
	rc.Metrics.Pending.Store(pending)
	rc.writeRouterStatus(ctx, routers, time.Now())
	return next, ctx.Err()
}

func (rc *Reconciler) defaults() {
	if rc.meshes == nil {
		rc.meshes, rc.retries = map[string]*meshState{}, map[string]retry{}
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
}

// forgetDeleted drops from the decode cache what the store no longer holds (when it is
// listed: a resource deleted meanwhile stays cached until the next listing).
func (rc *Reconciler) forgetDeleted(lists ...[]store.Item) {
	listed := make(map[store.Key]bool, len(rc.cache))
	for _, l := range lists {
		for _, it := range l {
			listed[it.Key] = true
		}
	}
	for k := range rc.cache {
		if !listed[k] {
			delete(rc.cache, k)
		}
	}
}

// readRouters reads what every mesh's pass needs of the routers: those whose dns an older
// one holds, the version of each (what unbinding is checked on), what the passes decide from
// (routersRead) and the zones of the others.
func (rc *Reconciler) readRouters(routers []store.Item) {
	rc.shadowed = rc.shadowedRouters(routers)
	rc.routerVer = make(map[string]int64, len(routers))
	var read strings.Builder
	for _, it := range routers {
		rc.routerVer[it.Mesh+"/"+it.Name] = it.Version
		read.WriteString(rc.routerSpec(it))
	}
	rc.routersRead = read.String()
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
}

// routerSpec is what a pass decides from of a router: all but its status (the replicas'
// readiness, written by the leader as they change, and the DNS condition): a router whose
// status alone changed leaves every decision as it was. A router that does not decode counts
// by its version.
func (rc *Reconciler) routerSpec(it store.Item) string {
	res, err := rc.decode(it)
	rt, ok := res.(*mesh.Router)
	if err != nil || !ok {
		return fmt.Sprintf("%s/%s@%d\n", it.Mesh, it.Name, it.Version)
	}
	spec := *rt
	spec.Status = nil
	return fmt.Sprintf("%s/%s %s %s\n", it.Mesh, it.Name, it.Created.UTC().Format(time.RFC3339Nano), Encode(&spec))
}

// listAll lists every resource of a kind in every mesh.
func listAll(ctx context.Context, st store.Store, kind string) ([]store.Item, int64, error) {
	items, _, rev, err := st.List(ctx, "", kind, "", 0)
	return items, rev, err
}

// meshItems are one mesh's routers, routes and bindings.
type meshItems struct {
	name  string
	items [3][]store.Item
}

// byMesh groups routers, routes and bindings by mesh, in the order of the meshes' names.
// The lists of a single mesh are used as they are.
func byMesh(lists ...[]store.Item) []meshItems {
	index := map[string]int{}
	var out []meshItems
	for _, l := range lists {
		for _, it := range l {
			if _, ok := index[it.Mesh]; !ok {
				index[it.Mesh] = len(out)
				out = append(out, meshItems{name: it.Mesh})
			}
		}
	}
	if len(out) == 1 {
		copy(out[0].items[:], lists)
		return out
	}
	for i, l := range lists {
		for _, it := range l {
			m := &out[index[it.Mesh]]
			m.items[i] = append(m.items[i], it)
		}
	}
	slices.SortFunc(out, func(a, b meshItems) int { return strings.Compare(a.name, b.name) })
	return out
}
