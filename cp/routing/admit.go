package routing

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/kumadp/kuma-dp/mesh"
)

// Admission is one route's admission on one router.
type Admission struct {
	Admitted bool
	Reason   string // when not admitted: HostAlreadyClaimed or RouteNotAdmitted
	Message  string
	// Host is the name the route is served under on the router (its final DNS name).
	Host string
}

// Older reports whether a is older than b: creation time, then namespace/name. The older
// route owns a host and path.
func Older(a, b *mesh.Route) bool {
	if c := a.CreationTime().Compare(b.CreationTime()); c != 0 {
		return c < 0
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name)) < 0
}

type claim struct {
	namespace string
	holder    *mesh.Route
}

// Admit decides, for one router, which of its routes are admitted (by namespace/name), with
// the rules of OpenShift's router:
//   - routes are taken oldest first; the oldest route with a host and path owns it, a newer
//     one gets HostAlreadyClaimed naming the holder;
//   - with namespaceOwnership Strict (the default), the namespace of the oldest route with a
//     host owns the host: routes of other namespaces cannot claim it, on any path
//     (InterNamespaceAllowed lets them claim other paths);
//   - wildcardPolicy Subdomain on www.acme.test claims *.acme.test: other namespaces'
//     hosts directly under acme.test are blocked, and a wildcard is refused when another
//     namespace holds a host under its domain (Strict only); acme.test itself is not covered;
//   - in Strict ownership, a name under a host or wildcard name another namespace holds is
//     refused too (HostAlreadyClaimed): in DNS it would make that name exist, empty, and stop
//     the wildcard that answered it (RFC 4592);
//   - wildcards are refused (RouteNotAdmitted) unless the router allows them, and an unknown
//     policy is RouteNotAdmitted; so is a final name that is not DNS-1123.
func Admit(router *mesh.Router, routes []*mesh.Route) map[string]Admission {
	routes = slices.Clone(routes)
	slices.SortFunc(routes, func(a, b *mesh.Route) int {
		if Older(a, b) {
			return -1
		}
		if Older(b, a) {
			return 1
		}
		return 0
	})
	a := &admitter{
		router:      router,
		strict:      router.RouteAdmission.NamespaceOwnership != mesh.NamespaceOwnershipAllowed,
		wildOK:      router.RouteAdmission.WildcardPolicy == mesh.WildcardsAllowed,
		hostOwner:   map[string]claim{},
		wildOwner:   map[string]claim{},
		domainHosts: map[string]map[string]claim{},
		paths:       map[string]claim{},
	}
	out := make(map[string]Admission, len(routes))
	for _, r := range routes {
		out[RouteKey(r)] = a.admit(r)
	}
	return out
}

// admitter is Admit's state: the names claimed so far, by the routes admitted (older first).
type admitter struct {
	router         *mesh.Router
	strict, wildOK bool                        // namespace ownership Strict; wildcards allowed
	hostOwner      map[string]claim            // host -> first claimant (namespace owner)
	wildOwner      map[string]claim            // domain -> first wildcard claimant
	domainHosts    map[string]map[string]claim // domain -> namespace -> a specific host under it
	paths          map[string]claim            // host (or *.domain) + path -> holder
}

// admit decides one route (older ones decided before it) and claims its names if admitted.
func (a *admitter) admit(r *mesh.Route) Admission {
	host, err := FinalDNS(r, a.router)
	if err != nil {
		return Admission{Reason: mesh.ReasonRouteNotAdmitted, Message: err.(*Error).Message}
	}
	reject := func(reason, msg string) Admission {
		return Admission{Reason: reason, Message: msg, Host: host}
	}
	policy := r.WildcardPolicyOf()
	switch policy {
	case mesh.WildcardNone:
	case mesh.WildcardSubdomain:
		if !a.wildOK {
			return reject(mesh.ReasonRouteNotAdmitted, fmt.Sprintf("wildcard routes are not allowed on router %s", a.router.Name))
		}
	default:
		return reject(mesh.ReasonRouteNotAdmitted, fmt.Sprintf("unsupported wildcard policy %q", policy))
	}
	wild := policy == mesh.WildcardSubdomain
	bare, domain := splitHost(host)
	if a.strict {
		if msg := a.heldElsewhere(r, wild, bare, domain); msg != "" {
			return reject(mesh.ReasonHostAlreadyClaimed, msg)
		}
	}
	pathKey := bare + r.Path
	if wild {
		pathKey = "*." + domain + r.Path
	}
	if c, ok := a.paths[pathKey]; ok {
		return reject(mesh.ReasonHostAlreadyClaimed, fmt.Sprintf("route %s has host %s%s and is older", RouteKey(c.holder), hostOf(c.holder, a.router), c.holder.Path))
	}
	a.claim(r, wild, pathKey, bare, domain)
	return Admission{Admitted: true, Host: host}
}

// heldElsewhere is why, in Strict ownership, another namespace holds the route's host
// (bare, or the wildcard *.domain when wild) or a name it would hide; "" when none does.
func (a *admitter) heldElsewhere(r *mesh.Route, wild bool, bare, domain string) string {
	if wild {
		if c, ok := a.wildOwner[domain]; ok && c.namespace != r.Namespace {
			return fmt.Sprintf("a route in another namespace holds *.%s", domain)
		}
		if c, ok := otherNamespace(a.domainHosts[domain], r.Namespace); ok {
			return fmt.Sprintf("a route in another namespace holds %s, under the wildcard *.%s", hostOf(c.holder, a.router), domain)
		}
		if held, ok := heldAbove(a.hostOwner, a.wildOwner, domain, r.Namespace); ok {
			return fmt.Sprintf("a route in another namespace holds %s, which the wildcard *.%s would hide (a name under it stops a wildcard that answered it, RFC 4592)", held, domain)
		}
		return ""
	}
	if c, ok := a.hostOwner[bare]; ok && c.namespace != r.Namespace {
		return fmt.Sprintf("a route in another namespace holds host %s", bare)
	}
	if c, ok := a.wildOwner[domain]; ok && domain != "" && c.namespace != r.Namespace {
		return fmt.Sprintf("a route in another namespace holds the wildcard *.%s, which covers host %s", domain, bare)
	}
	if held, ok := heldAbove(a.hostOwner, a.wildOwner, domain, r.Namespace); ok {
		return fmt.Sprintf("a route in another namespace holds %s, which host %s under it would hide (a name under it stops a wildcard that answered it, RFC 4592)", held, bare)
	}
	return ""
}

// claim records an admitted route's names: its host and path, and the host or wildcard as
// its namespace's when first.
func (a *admitter) claim(r *mesh.Route, wild bool, pathKey, bare, domain string) {
	cl := claim{namespace: r.Namespace, holder: r}
	a.paths[pathKey] = cl
	if wild {
		if _, ok := a.wildOwner[domain]; !ok {
			a.wildOwner[domain] = cl
		}
		return
	}
	if _, ok := a.hostOwner[bare]; !ok {
		a.hostOwner[bare] = cl
	}
	if a.domainHosts[domain] == nil {
		a.domainHosts[domain] = map[string]claim{}
	}
	if _, ok := a.domainHosts[domain][r.Namespace]; !ok {
		a.domainHosts[domain][r.Namespace] = cl
	}
}

// heldAbove is the name at or above name (name, then its ancestors) that a route of a
// namespace other than ns holds and a wildcard answers: a system route's name (the shard's
// wildcard answers it), or a name under another namespace's wildcard. A name added under it
// makes it exist with no data of its own and stops the wildcard that answered it (RFC 4592
// 2.2.2), so in Strict ownership such a name is another namespace's to take. (A user name
// is a CNAME of its own: names under it take nothing from it.)
func heldAbove(hostOwner, wildOwner map[string]claim, name, ns string) (string, bool) {
	for a := name; a != ""; {
		if c, ok := hostOwner[a]; ok && c.namespace != ns && c.holder.DNSTypeOf() == mesh.DNSTypeSystem {
			return a, true
		}
		_, up, _ := strings.Cut(a, ".")
		if c, ok := wildOwner[up]; ok && up != "" && c.namespace != ns {
			return "*." + up, true
		}
		a = up
	}
	return "", false
}

// otherNamespace is a claim in m by a namespace other than ns (the lowest namespace, for
// a stable message).
func otherNamespace(m map[string]claim, ns string) (claim, bool) {
	var best claim
	found := false
	for n, c := range m {
		if n != ns && (!found || n < best.namespace) {
			best, found = c, true
		}
	}
	return best, found
}

func hostOf(r *mesh.Route, router *mesh.Router) string {
	h, err := FinalDNS(r, router)
	if err != nil {
		return r.Host
	}
	return h
}

// splitHost is a host without a leading "*." and the domain a wildcard on it covers:
// www.acme.test and *.acme.test both give acme.test.
func splitHost(host string) (bare, domain string) {
	if d, ok := strings.CutPrefix(host, "*."); ok {
		return d, d
	}
	_, domain, _ = strings.Cut(host, ".")
	return host, domain
}
