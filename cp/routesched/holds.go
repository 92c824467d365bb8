package routesched

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kumadp/kuma-dp/cp/routing"
	"github.com/kumadp/kuma-dp/cp/store"
	"github.com/kumadp/kuma-dp/mesh"
)

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

// nameClaim is the route that holds a user DNS name across meshes, as read.
type nameClaim struct {
	mesh  string
	route *mesh.Route
	item  store.Item
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

// claimedElsewhere says whether user route r's name is held by a route of a mesh other than
// meshName (what a binding's check reads of the other meshes' routes).
func (rc *Reconciler) claimedElsewhere(meshName string, r *mesh.Route) bool {
	if r.DNSTypeOf() != mesh.DNSTypeUser {
		return false
	}
	c, ok := rc.names[userDNSName(r)]
	return ok && c.mesh != meshName
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

// readUserRoutes finds the user routes among routes (every route of every mesh).
func (rc *Reconciler) readUserRoutes(routes []store.Item) {
	rc.userRoutes = map[store.Key]bool{}
	for _, it := range routes {
		rc.noteUserRoute(it.Key)
	}
}

// noteUserRoute records whether route k, as the mirror holds it, is a user route.
func (rc *Reconciler) noteUserRoute(k store.Key) {
	delete(rc.userRoutes, k)
	if it, ok := rc.mirror.items[k]; ok {
		if res, err := rc.decode(it); err == nil {
			if r, ok := res.(*mesh.Route); ok && r.DNSTypeOf() == mesh.DNSTypeUser {
				rc.userRoutes[k] = true
			}
		}
	}
}

// boundNames are the user DNS names of the bound routes of every mesh, each held by its
// oldest route.
func (rc *Reconciler) boundNames() map[string]nameClaim {
	out := map[string]nameClaim{}
	for k := range rc.userRoutes {
		it, ok := rc.mirror.items[k]
		if !ok {
			continue
		}
		res, err := rc.decode(it)
		r, ok := res.(*mesh.Route)
		if err != nil || !ok || r.DNSTypeOf() != mesh.DNSTypeUser {
			continue
		}
		if _, bound := rc.mirror.items[store.Key{Mesh: it.Mesh, Type: mesh.KindRouteBinding, Name: it.Name}]; !bound {
			continue
		}
		name := userDNSName(r)
		if c, held := out[name]; !held || routing.Older(r, c.route) {
			out[name] = nameClaim{mesh: it.Mesh, route: r, item: it}
		}
	}
	return out
}
