package routing

import (
	"strings"

	"github.com/kumadp/kuma-dp/mesh"
)

// Admitter keeps one router's routes and their admission, and on a change computes again
// only the admission of the routes the change can affect, with the same decisions as Admit
// over every route of the router.
//
// A route's admission reads the claims of the older routes on names related to its own:
// its host (the domain, for a Subdomain wildcard), the names above it (a wildcard or a
// system name there holds it, Strict ownership), and the names under it (a wildcard is
// refused when another namespace holds a host under its domain). So routes whose names
// are not one above the other never read each other's claims. Each route sits at a node
// of the DNS tree - its host, or the domain of its wildcard - and the routes that can
// affect one another are those under the topmost node holding a route above them: a route
// changed, added or removed at node n changes the admission of routes under that node
// only (of the tree before and after the change), and that is what Changes admits again,
// oldest first as Admit does. At 10,000 system routes on a router, a change recomputes the
// routes of one name, not 10,000.
type Admitter struct {
	router *mesh.Router
	routes map[string]*mesh.Route
	node   map[string]string              // route key -> its node (none: its name is refused)
	at     map[string]map[string]struct{} // node -> the keys of the routes at it
	below  map[string]int                 // node -> routes at or under it
	kids   map[string]map[string]struct{} // node -> its children with routes at or under them
	last   map[string]Admission
	dirty  map[string]struct{} // nodes changed since the last Changes
	keys   map[string]struct{} // routes without a node, and routes removed, since then
}

// NewAdmitter is the admitter of router.
func NewAdmitter(router *mesh.Router) *Admitter {
	return &Admitter{router: router, routes: map[string]*mesh.Route{}, node: map[string]string{},
		at: map[string]map[string]struct{}{}, below: map[string]int{}, kids: map[string]map[string]struct{}{},
		last: map[string]Admission{}, dirty: map[string]struct{}{}, keys: map[string]struct{}{}}
}

// Set adds or replaces a route. A new version that claims the same (its status changed,
// say) changes no admission.
func (a *Admitter) Set(r *mesh.Route) {
	k := RouteKey(r)
	if old, ok := a.routes[k]; ok && sameClaim(old, r) {
		a.routes[k] = r
		return
	}
	a.Delete(k)
	a.routes[k] = r
	n, ok := a.nodeOf(r)
	if !ok {
		a.keys[k] = struct{}{}
		return
	}
	a.node[k] = n
	if a.at[n] == nil {
		a.at[n] = map[string]struct{}{}
	}
	a.at[n][k] = struct{}{}
	for x := n; ; {
		a.below[x]++
		if x == "" {
			break
		}
		p := parent(x)
		if a.kids[p] == nil {
			a.kids[p] = map[string]struct{}{}
		}
		a.kids[p][x] = struct{}{}
		x = p
	}
	a.dirty[n] = struct{}{}
}

// Delete removes a route (namespace/name).
func (a *Admitter) Delete(key string) {
	if _, ok := a.routes[key]; !ok {
		return
	}
	delete(a.routes, key)
	a.keys[key] = struct{}{}
	n, ok := a.node[key]
	if !ok {
		return
	}
	delete(a.node, key)
	if delete(a.at[n], key); len(a.at[n]) == 0 {
		delete(a.at, n)
	}
	for x := n; ; {
		if a.below[x]--; a.below[x] <= 0 {
			delete(a.below, x)
			if x != "" {
				if delete(a.kids[parent(x)], x); len(a.kids[parent(x)]) == 0 {
					delete(a.kids, parent(x))
				}
			}
		}
		if x == "" {
			break
		}
		x = parent(x)
	}
	a.dirty[n] = struct{}{}
}

// Len is the number of routes on the router.
func (a *Admitter) Len() int { return len(a.routes) }

// Admission is a route's admission as last computed.
func (a *Admitter) Admission(key string) (Admission, bool) {
	ad, ok := a.last[key]
	return ad, ok
}

// Changes computes again the admission of the routes the changes since the last call can
// affect, and returns the routes whose admission changed (new routes included).
func (a *Admitter) Changes() map[string]Admission {
	affected := map[string]*mesh.Route{}
	tops := map[string]bool{}
	for n := range a.dirty {
		top := n
		for x := n; ; x = parent(x) {
			if len(a.at[x]) > 0 {
				top = x
			}
			if x == "" {
				break
			}
		}
		if !tops[top] {
			tops[top] = true
			a.collect(top, affected)
		}
	}
	for k := range a.keys {
		if r, ok := a.routes[k]; ok {
			affected[k] = r
		} else {
			delete(a.last, k)
		}
	}
	clear(a.dirty)
	clear(a.keys)
	rs := make([]*mesh.Route, 0, len(affected))
	for _, r := range affected {
		rs = append(rs, r)
	}
	return a.record(Admit(a.router, rs))
}

// Recompute computes every route's admission again (one Admit over all of them) and
// returns the routes whose admission changed.
func (a *Admitter) Recompute() map[string]Admission {
	for k := range a.keys {
		if _, ok := a.routes[k]; !ok {
			delete(a.last, k)
		}
	}
	clear(a.dirty)
	clear(a.keys)
	rs := make([]*mesh.Route, 0, len(a.routes))
	for _, r := range a.routes {
		rs = append(rs, r)
	}
	return a.record(Admit(a.router, rs))
}

func (a *Admitter) record(res map[string]Admission) map[string]Admission {
	changed := map[string]Admission{}
	for k, ad := range res {
		if old, ok := a.last[k]; !ok || old != ad {
			changed[k] = ad
		}
		a.last[k] = ad
	}
	return changed
}

// collect adds the routes at node n and under it.
func (a *Admitter) collect(n string, out map[string]*mesh.Route) {
	for k := range a.at[n] {
		out[k] = a.routes[k]
	}
	for c := range a.kids[n] {
		a.collect(c, out)
	}
}

// nodeOf is the node of the DNS tree route r sits at: its final name without a leading
// "*.", or for a Subdomain wildcard the domain it covers ("" is the root, above every
// name); none when the final name is refused (such a route claims nothing).
func (a *Admitter) nodeOf(r *mesh.Route) (string, bool) {
	host, err := FinalDNS(r, a.router)
	if err != nil {
		return "", false
	}
	bare, domain := splitHost(host)
	if r.WildcardPolicyOf() == mesh.WildcardSubdomain {
		return domain, true
	}
	return bare, true
}

// sameClaim says whether a and b are admitted alike: the same of everything Admit reads
// of a route (status and labels aside).
func sameClaim(a, b *mesh.Route) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.Host == b.Host && a.Path == b.Path &&
		a.DNSType == b.DNSType && a.WildcardPolicy == b.WildcardPolicy && a.CreationTime().Equal(b.CreationTime())
}

// parent is the name one label up ("" above a single label), as Admit walks up a name.
func parent(name string) string {
	_, up, _ := strings.Cut(name, ".")
	return up
}
