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
	if c := a.CreationTime.Compare(b.CreationTime); c != 0 {
		return c < 0
	}
	return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name)) < 0
}

// Admitter decides which routes one router admits. It keeps the router's routes and
// recomputes every claim from them on each change, so a host change or a deletion releases
// its claims at once (never a phantom conflict) and a route replaced by a new version never
// conflicts with its old self.
type Admitter struct {
	router *mesh.Router
	routes map[string]*mesh.Route
	last   map[string]Admission
}

// NewAdmitter is the admitter of router.
func NewAdmitter(router *mesh.Router) *Admitter {
	return &Admitter{router: router, routes: map[string]*mesh.Route{}, last: map[string]Admission{}}
}

// Set adds or replaces a route.
func (a *Admitter) Set(r *mesh.Route) { a.routes[RouteKey(r)] = r }

// Delete removes a route (namespace/name).
func (a *Admitter) Delete(key string) { delete(a.routes, key) }

// Len is the number of routes on the router.
func (a *Admitter) Len() int { return len(a.routes) }

// Changes recomputes admission and returns the routes whose admission changed since the
// last call (displaced holders included), and the full result.
func (a *Admitter) Changes() (changed map[string]Admission, all map[string]Admission) {
	all = Admit(a.router, a.sorted())
	changed = map[string]Admission{}
	for k, ad := range all {
		if old, ok := a.last[k]; !ok || old != ad {
			changed[k] = ad
		}
	}
	a.last = all
	return changed, all
}

func (a *Admitter) sorted() []*mesh.Route {
	out := make([]*mesh.Route, 0, len(a.routes))
	for _, r := range a.routes {
		out = append(out, r)
	}
	return out
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
	strict := router.RouteAdmission.NamespaceOwnership != mesh.NamespaceOwnershipAllowed
	wildOK := router.RouteAdmission.WildcardPolicy == mesh.WildcardsAllowed
	hostOwner := map[string]claim{}              // host -> first claimant (namespace owner)
	wildOwner := map[string]claim{}              // domain -> first wildcard claimant
	domainHosts := map[string]map[string]claim{} // domain -> namespace -> a specific host under it
	paths := map[string]claim{}                  // host (or *.domain) + path -> holder
	out := make(map[string]Admission, len(routes))
	for _, r := range routes {
		k := RouteKey(r)
		host, err := FinalDNS(r, router)
		if err != nil {
			out[k] = Admission{Reason: mesh.ReasonRouteNotAdmitted, Message: err.(*Error).Message}
			continue
		}
		reject := func(reason, format string, args ...any) {
			out[k] = Admission{Reason: reason, Message: fmt.Sprintf(format, args...), Host: host}
		}
		policy := r.WildcardPolicyOf()
		bare, domain := splitHost(host)
		switch policy {
		case mesh.WildcardNone:
		case mesh.WildcardSubdomain:
			if !wildOK {
				reject(mesh.ReasonRouteNotAdmitted, "wildcard routes are not allowed on router %s", router.Name)
				continue
			}
		default:
			reject(mesh.ReasonRouteNotAdmitted, "unsupported wildcard policy %q", policy)
			continue
		}
		pathKey := bare + r.Path
		if policy == mesh.WildcardSubdomain {
			pathKey = "*." + domain + r.Path
		}
		if strict {
			if policy == mesh.WildcardSubdomain {
				if c, ok := wildOwner[domain]; ok && c.namespace != r.Namespace {
					reject(mesh.ReasonHostAlreadyClaimed, "a route in another namespace holds *.%s", domain)
					continue
				}
				if c, ok := otherNamespace(domainHosts[domain], r.Namespace); ok {
					reject(mesh.ReasonHostAlreadyClaimed, "a route in another namespace holds %s, under the wildcard *.%s", hostOf(c.holder, router), domain)
					continue
				}
				if held, ok := heldAbove(hostOwner, wildOwner, domain, r.Namespace); ok {
					reject(mesh.ReasonHostAlreadyClaimed, "a route in another namespace holds %s, which the wildcard *.%s would hide (a name under it stops a wildcard that answered it, RFC 4592)", held, domain)
					continue
				}
			} else {
				if c, ok := hostOwner[bare]; ok && c.namespace != r.Namespace {
					reject(mesh.ReasonHostAlreadyClaimed, "a route in another namespace holds host %s", bare)
					continue
				}
				if c, ok := wildOwner[domain]; ok && domain != "" && c.namespace != r.Namespace {
					reject(mesh.ReasonHostAlreadyClaimed, "a route in another namespace holds the wildcard *.%s, which covers host %s", domain, bare)
					continue
				}
				if held, ok := heldAbove(hostOwner, wildOwner, domain, r.Namespace); ok {
					reject(mesh.ReasonHostAlreadyClaimed, "a route in another namespace holds %s, which host %s under it would hide (a name under it stops a wildcard that answered it, RFC 4592)", held, bare)
					continue
				}
			}
		}
		if c, ok := paths[pathKey]; ok {
			reject(mesh.ReasonHostAlreadyClaimed, "route %s has host %s%s and is older", RouteKey(c.holder), hostOf(c.holder, router), c.holder.Path)
			continue
		}
		cl := claim{namespace: r.Namespace, holder: r}
		paths[pathKey] = cl
		if policy == mesh.WildcardSubdomain {
			if _, ok := wildOwner[domain]; !ok {
				wildOwner[domain] = cl
			}
		} else {
			if _, ok := hostOwner[bare]; !ok {
				hostOwner[bare] = cl
			}
			if domainHosts[domain] == nil {
				domainHosts[domain] = map[string]claim{}
			}
			if _, ok := domainHosts[domain][r.Namespace]; !ok {
				domainHosts[domain][r.Namespace] = cl
			}
		}
		out[k] = Admission{Admitted: true, Host: host}
	}
	return out
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
