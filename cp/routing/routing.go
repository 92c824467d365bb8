// Package routing owns router shards' decisions, free of any store: which routers may take a
// route (their selectors), which one a route is scheduled onto (a pluggable Strategy:
// round-robin, least-routes or a user-written one, with host and wildcard-domain affinity so
// a name is never served by two shards), which routes each router admits (the oldest route
// owns a host and path, namespace ownership, wildcard claims) and the final DNS names.
//
// Everything here is deterministic and in memory; the control plane's reconciler feeds it
// what the store holds and writes its answers back.
package routing

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kumadp/kuma-dp/internal/errtext"
	"github.com/kumadp/kuma-dp/mesh"
)

// Error is a scheduling or naming problem, with the reason shown in the route's status.
type Error struct {
	Reason  string
	Message string
}

func (e *Error) Error() string { return e.Reason + ": " + e.Message }

// RouteKey is the identity of a route: namespace/name.
func RouteKey(r *mesh.Route) string { return r.Namespace + "/" + r.Name }

// Matches reports whether router takes route: every routeSelector label is on the route and
// the route's namespace is selected (an empty selector takes everything).
func Matches(router *mesh.Router, r *mesh.Route) bool {
	for k, v := range router.RouteSelector {
		if got, ok := r.Labels()[k]; !ok || got != v {
			return false
		}
	}
	if len(router.NamespaceSelector) == 0 {
		return true
	}
	return slices.Contains(router.NamespaceSelector, r.Namespace) || slices.Contains(router.NamespaceSelector, mesh.Wildcard)
}

// Candidates are the routers (sorted by name) that take route.
func Candidates(routers []*mesh.Router, r *mesh.Route) []*mesh.Router {
	var out []*mesh.Router
	for _, rt := range routers {
		if Matches(rt, r) {
			out = append(out, rt)
		}
	}
	slices.SortFunc(out, func(a, b *mesh.Router) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// ZoneOwner is the router whose DNS zone holds user route r's name - its host, or for a
// Subdomain wildcard the domain it covers - the deepest such zone; nil for a system route or
// a name in no router's zone. Only that router may serve the name: the control plane's DNS
// answers every name of the zone, and a CNAME there to another router would take the name (a
// shard's system name, or with a wildcard over the zone every one of them) away from it.
// The zone's apex, the router's canonical name (and names under it) and a wildcard over the
// whole zone are refused (RouteNotAdmitted): the apex holds the zone's SOA and NS, user
// names' CNAMEs point at the canonical name, which a name under it would leave empty (RFC
// 4592), and the wildcard is the shard's own.
func ZoneOwner(routers []*mesh.Router, r *mesh.Route) (*mesh.Router, error) {
	if r.DNSTypeOf() != mesh.DNSTypeUser {
		return nil, nil
	}
	name := strings.ToLower(strings.TrimSuffix(r.Host, "."))
	wild := r.WildcardPolicyOf() == mesh.WildcardSubdomain
	if wild {
		_, name = splitHost(name)
	}
	var owner *mesh.Router
	for _, rt := range routers {
		zone := strings.ToLower(strings.TrimSuffix(rt.DNS, "."))
		if zone == "" || (name != zone && !strings.HasSuffix(name, "."+zone)) {
			continue
		}
		if owner == nil || len(zone) > len(owner.DNS) || len(zone) == len(owner.DNS) && rt.Name < owner.Name {
			owner = rt
		}
	}
	if owner == nil {
		return nil, nil
	}
	canonical := "router-" + strings.ToLower(owner.Name) + "." + strings.ToLower(owner.DNS)
	switch {
	case wild && name == strings.ToLower(owner.DNS):
		return owner, &Error{Reason: mesh.ReasonRouteNotAdmitted, Message: fmt.Sprintf("a wildcard over *.%s would take every name of router %s's zone %s", name, owner.Name, owner.DNS)}
	case !wild && name == strings.ToLower(owner.DNS):
		return owner, &Error{Reason: mesh.ReasonRouteNotAdmitted, Message: fmt.Sprintf("host %s is the apex of router %s's zone (its SOA and NS): use a name under it", r.Host, owner.Name)}
	case !wild && name == canonical:
		return owner, &Error{Reason: mesh.ReasonRouteNotAdmitted, Message: fmt.Sprintf("host %s is router %s's canonical name, where user names point: use another name", r.Host, owner.Name)}
	case name == canonical || strings.HasSuffix(name, "."+canonical):
		return owner, &Error{Reason: mesh.ReasonRouteNotAdmitted, Message: fmt.Sprintf("host %s is under router %s's canonical name %s, where user names point: a name under it would stop the shard's wildcard answering it (RFC 4592)", r.Host, owner.Name, canonical)}
	}
	return owner, nil
}

// zoneCandidates narrows cands to the router whose zone holds r's name, when there is one.
func zoneCandidates(routers, cands []*mesh.Router, r *mesh.Route) ([]*mesh.Router, error) {
	owner, err := ZoneOwner(routers, r)
	if err != nil || owner == nil {
		return cands, err
	}
	if slices.ContainsFunc(cands, func(c *mesh.Router) bool { return c.Name == owner.Name }) {
		return []*mesh.Router{owner}, nil
	}
	return nil, &Error{Reason: mesh.ReasonNoRouterMatches, Message: fmt.Sprintf("host %s is in router %s's zone %s, and only that router may serve it; it does not take route %s", r.Host, owner.Name, owner.DNS, RouteKey(r))}
}

// FinalDNS is the name a route is served under on router: for dnsType system
// <namespace>-<host>.<router dns>; for dnsType user the host itself (the user's domain
// CNAMEs to the router's DNS name). A name that is not DNS-1123 (a label over 63 characters,
// the name over 253) is refused with the reason RouteNotAdmitted.
func FinalDNS(r *mesh.Route, router *mesh.Router) (string, error) {
	if r.DNSTypeOf() == mesh.DNSTypeUser {
		return r.Host, nil
	}
	name := r.Namespace + "-" + r.Host + "." + router.DNS
	if err := mesh.CheckDNSName(name); err != nil {
		return "", &Error{Reason: mesh.ReasonRouteNotAdmitted, Message: fmt.Sprintf("the final name %q on router %s: %v", errtext.Clip(name, 300), router.Name, err)}
	}
	return name, nil
}

// affinityKey is what routes that must share a router have in common: the name they are
// served under before the router is known (namespace-host for system names, the host for
// user names), and, for a wildcard, the domain it covers.
func affinityKeys(r *mesh.Route) (host, domain string, wildcard bool) {
	if r.DNSTypeOf() == mesh.DNSTypeSystem {
		return "system:" + r.Namespace + "-" + r.Host, "", false
	}
	h, domain := splitHost(r.Host)
	if r.WildcardPolicy == mesh.WildcardSubdomain {
		return "", domain, true
	}
	return h, domain, false
}
