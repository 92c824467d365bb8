package shardzones

import (
	"cmp"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/cp/decoded"
	"github.com/kumadp/kuma-dp/cp/routerstatus"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

// view is what the zones read of the store, kept change by change: each resource is decoded
// once, when it is listed or changes (never at a build), and only what the zones read of it
// is kept - the Routers decoded (a mesh has few), of a Dataplane that a Router selects its
// name, address, version and the routers selecting it, of an admitted user Route its name.
// A Dataplane no Router selects costs nothing here: it is not kept, and not even decoded
// while its mesh has no Router selecting dataplanes. A Router new or selecting other
// dataplanes needs the dataplanes not kept: take says so, and the store is listed again.
//
// A resource is taken as the kind its key names: a document of another kind stored under it
// (by hand: the API refuses it) is not in the zones.
type view struct {
	log      *slog.Logger
	routers  map[store.Key]*routerIn
	replicas map[store.Key]*replicaIn // the Dataplanes a Router selects
	users    map[store.Key]authdns.UserName
	decodes  int // documents decoded, for tests
}

// routerIn is a stored Router, decoded.
type routerIn struct {
	rt       *mesh.Router
	version  int64
	created  time.Time
	selector string // rt.Dataplanes as text: what the replicas were matched with
}

// replicaIn is what the zones read of a Dataplane a Router selects.
type replicaIn struct {
	name, address string
	version       int64
	routers       []store.Key // the Routers of its mesh that select it
}

func newView(log *slog.Logger) *view {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &view{log: log, routers: map[store.Key]*routerIn{}, replicas: map[store.Key]*replicaIn{}, users: map[store.Key]authdns.UserName{}}
}

// load takes items as everything the store holds: the Routers first, since they say which
// Dataplanes to decode and keep.
func (v *view) load(items []store.Item) {
	clear(v.routers)
	clear(v.replicas)
	clear(v.users)
	for _, it := range items {
		if it.Type == mesh.KindRouter {
			v.take(it)
		}
	}
	for _, it := range items {
		if it.Type != mesh.KindRouter {
			v.take(it)
		}
	}
}

// take records one resource written. It reports whether the store must be listed again: a
// Router new, or selecting other dataplanes than before (the dataplanes not kept may be
// its replicas).
func (v *view) take(it store.Item) (relist bool) {
	switch it.Type {
	case mesh.KindRouter:
		return v.takeRouter(it)
	case mesh.KindDataplane:
		v.takeDataplane(it)
	case mesh.KindRoute:
		v.takeRoute(it)
	default:
		decoded.Pass(it)
	}
	return false
}

// remove forgets a resource deleted.
func (v *view) remove(k store.Key) {
	if _, ok := v.routers[k]; ok {
		v.dropRouter(k)
	}
	delete(v.replicas, k)
	delete(v.users, k)
}

func (v *view) takeRouter(it store.Item) (relist bool) {
	rt := decodeAs[*mesh.Router](v, it)
	old := v.routers[it.Key]
	if rt == nil {
		if old != nil {
			v.dropRouter(it.Key)
		}
		return false
	}
	sel := rt.Dataplanes.String()
	v.routers[it.Key] = &routerIn{rt: rt, version: it.Version, created: it.Created, selector: sel}
	return len(rt.Dataplanes) > 0 && (old == nil || old.selector != sel)
}

// dropRouter forgets a Router, and the Dataplanes only it selected.
func (v *view) dropRouter(k store.Key) {
	delete(v.routers, k)
	for dk, r := range v.replicas {
		if r.routers = slices.DeleteFunc(r.routers, func(rk store.Key) bool { return rk == k }); len(r.routers) == 0 {
			delete(v.replicas, dk)
		}
	}
}

func (v *view) takeDataplane(it store.Item) {
	delete(v.replicas, it.Key)
	if !v.selecting(it.Mesh) {
		decoded.Pass(it)
		return // no Router of its mesh selects dataplanes: not decoded
	}
	dp := decodeAs[*mesh.Dataplane](v, it)
	if dp == nil {
		return
	}
	var by []store.Key
	for k, r := range v.routers {
		if _, ok := r.rt.Replica(dp); ok && r.rt.Mesh == dp.Mesh {
			by = append(by, k)
		}
	}
	if len(by) > 0 { // copies: the decoded strings sit in its decoder's blocks
		v.replicas[it.Key] = &replicaIn{name: strings.Clone(dp.Name), address: strings.Clone(routerstatus.Address(dp)), version: it.Version, routers: by}
	}
}

// selecting reports whether a Router of mesh m selects dataplanes.
func (v *view) selecting(m string) bool {
	for _, r := range v.routers {
		if r.rt.Mesh == m && len(r.rt.Dataplanes) > 0 {
			return true
		}
	}
	return false
}

func (v *view) takeRoute(it store.Item) {
	delete(v.users, it.Key)
	r := decodeAs[*mesh.Route](v, it)
	if r == nil || r.DNSType != mesh.DNSTypeUser || !r.Admitted() {
		return
	}
	v.users[it.Key] = authdns.UserName{Name: strings.Clone(userName(r)), Router: strings.Clone(r.Status.Router), Mesh: it.Mesh, Revision: it.Version}
}

// decodeAs is a stored resource decoded as the kind its key names, its mesh the key's (nil,
// and a warning, when it does not decode or is another kind). The feed and the routers'
// status share the decoded resource (package decoded): it is read, never changed.
func decodeAs[T mesh.Resource](v *view, it store.Item) T {
	v.decodes++
	r, err := decoded.As[T](it)
	if err != nil {
		v.log.Warn("a stored resource is not taken; not in the zones", "resource", it.Key.String(), "error", err)
	}
	return r
}

// input is the zones' input from what the view holds: every Router, oldest first, with its
// replicas and their readiness as its status says (package routerstatus: the leader writes
// it, the views show it; a router with no status yet has its selected dataplanes, none
// ready), and every Route of dnsType user admitted on the router it is scheduled onto. A
// zone's revision is that of its newest input: its Router, the Dataplanes it selects, the
// user Routes admitted on it. The user names come in the order userOrder gives their keys
// (nil: the store's, as its list gives them).
func (v *view) input(userOrder func(a, b store.Key) int) authdns.Input {
	var in authdns.Input
	selected := map[store.Key][]store.Key{} // router -> its replicas, by key
	for dk, r := range v.replicas {
		for _, rk := range r.routers {
			selected[rk] = append(selected[rk], dk)
		}
	}
	for _, rk := range v.routerOrder() {
		r := v.routers[rk]
		zr := authdns.Router{Name: r.rt.Name, Mesh: r.rt.Mesh, DNS: r.rt.DNS, Revision: r.version}
		for _, dk := range selected[rk] {
			zr.Revision = max(zr.Revision, v.replicas[dk].version)
		}
		for _, rep := range v.replicasOf(r.rt, selected[rk]) {
			if a, err := netip.ParseAddr(rep.Address); err == nil {
				zr.Replicas = append(zr.Replicas, authdns.Replica{Name: rep.Name, Addrs: []netip.Addr{a}, Ready: rep.Ready})
			}
		}
		in.Routers = append(in.Routers, zr)
	}
	users := sortedKeys(v.users)
	if userOrder != nil {
		slices.SortStableFunc(users, userOrder)
	}
	for _, uk := range users {
		u := v.users[uk]
		in.Users = append(in.Users, u)
		for i := range in.Routers { // the route's change is a change of its router's zone too
			if in.Routers[i].Name == u.Router && in.Routers[i].Mesh == u.Mesh {
				in.Routers[i].Revision = max(in.Routers[i].Revision, u.Revision)
			}
		}
	}
	return in
}

// routerOrder is the routers oldest first (the store's creation time, then mesh and name):
// of two routers with one dns, the older keeps its zone (authdns serves the first), as the
// scheduler decides.
func (v *view) routerOrder() []store.Key {
	keys := sortedKeys(v.routers)
	slices.SortStableFunc(keys, func(a, b store.Key) int {
		ra, rb := v.routers[a], v.routers[b]
		return cmp.Or(ra.created.Compare(rb.created), strings.Compare(ra.rt.Mesh+"/"+ra.rt.Name, rb.rt.Mesh+"/"+rb.rt.Name))
	})
	return keys
}

// replicasOf are rt's replicas as its status says, or, before the leader wrote one, the
// dataplanes it selects (keys), none ready, by name (the zone answers them all: fail static).
func (v *view) replicasOf(rt *mesh.Router, keys []store.Key) []mesh.RouterReplica {
	if rt.Status != nil {
		return rt.Status.Replicas
	}
	slices.SortFunc(keys, compareKeys)
	out := make([]mesh.RouterReplica, 0, len(keys))
	for _, k := range keys {
		r := v.replicas[k]
		out = append(out, mesh.RouterReplica{Name: r.name, Address: r.address})
	}
	slices.SortStableFunc(out, func(a, b mesh.RouterReplica) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// sortedKeys are m's keys in the order of a store's list (their strings' order).
func sortedKeys[V any](m map[store.Key]V) []store.Key {
	keys := make([]store.Key, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

func compareKeys(a, b store.Key) int { return strings.Compare(a.String(), b.String()) }
