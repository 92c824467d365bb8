package mesh

import (
	"strings"
	"time"
)

// Router shards: a Router is a set of gateway dataplanes (its replicas) with a public DNS
// name; a Route exposes a mesh service under a hostname through one Router; a RouteBinding
// records which Router a Route was scheduled onto and its final DNS name. These are the
// control plane's resources: agents never receive them.

// Kind names of the routing resources.
const (
	KindRouter       = "Router"
	KindRoute        = "Route"
	KindRouteBinding = "RouteBinding"
)

// Route DNS types: system (the host is a prefix, the control plane gives the final name)
// and user (the user owns the host and points it at the router's canonical name).
const (
	DNSTypeSystem = "system"
	DNSTypeUser   = "user"
)

// Wildcard policies of a Route.
const (
	WildcardNone      = "None"
	WildcardSubdomain = "Subdomain"
)

// Route phases.
const (
	PhaseNew       = "new"
	PhaseScheduled = "scheduled"
)

// Router admission settings.
const (
	NamespaceOwnershipStrict  = "Strict"
	NamespaceOwnershipAllowed = "InterNamespaceAllowed"
	WildcardsDisallowed       = "WildcardsDisallowed"
	WildcardsAllowed          = "WildcardsAllowed"
)

// Admission condition reasons.
const (
	ReasonHostAlreadyClaimed = "HostAlreadyClaimed"
	ReasonRouteNotAdmitted   = "RouteNotAdmitted"
	ReasonNoRouterMatches    = "NoRouterMatches"
)

// Router is one shard: the routes it takes (routeSelector, namespaceSelector; empty = all),
// its public DNS name and the gateway dataplanes serving it.
type Router struct {
	Meta
	Description string `json:"description,omitempty"`
	// DNS is the shard's public DNS name (e.g. shard1.apps.example.com): system routes get
	// names under it and user routes CNAME to it.
	DNS string `json:"dns"`
	// RouteSelector: labels a route must carry (every entry); empty takes every route.
	RouteSelector map[string]string `json:"routeSelector,omitempty"`
	// NamespaceSelector: the namespaces whose routes it takes; empty takes every namespace.
	// An entry "*" also takes every namespace.
	NamespaceSelector []string `json:"namespaceSelector,omitempty"`
	// Dataplanes picks the router's gateway dataplanes (its replicas) by inbound tags.
	Dataplanes Tags `json:"dataplanes,omitempty"`
	// RouteAdmission: how the router resolves host claims.
	RouteAdmission RouteAdmission `json:"routeAdmission,omitempty"`
}

// RouteAdmission is Router.routeAdmission.
type RouteAdmission struct {
	// NamespaceOwnership: Strict (default) or InterNamespaceAllowed.
	NamespaceOwnership string `json:"namespaceOwnership,omitempty"`
	// WildcardPolicy: WildcardsDisallowed (default) or WildcardsAllowed.
	WildcardPolicy string `json:"wildcardPolicy,omitempty"`
}

// Route exposes a mesh service (To) under a host through one router.
type Route struct {
	Meta
	Namespace      string       `json:"namespace"`
	Host           string       `json:"host"`
	DNSType        string       `json:"dnsType,omitempty"` // system (default) | user
	Path           string       `json:"path,omitempty"`
	WildcardPolicy string       `json:"wildcardPolicy,omitempty"` // None (default) | Subdomain
	To             RouteTarget  `json:"to"`
	Status         *RouteStatus `json:"status,omitempty"`
}

// RouteTarget is the mesh service a route sends to.
type RouteTarget struct {
	Service string `json:"service"`
	Port    uint32 `json:"port"`
}

// RouteStatus is set by the control plane only: phase and dns only through a RouteBinding.
type RouteStatus struct {
	Phase  string `json:"phase,omitempty"`
	DNS    string `json:"dns,omitempty"`
	Router string `json:"router,omitempty"`
	// RouterCanonicalHostname is the router's DNS name, what a user domain must CNAME to.
	RouterCanonicalHostname string `json:"routerCanonicalHostname,omitempty"`
	// Reason and Message say why the route is not scheduled yet (e.g. NoRouterMatches).
	Reason  string         `json:"reason,omitempty"`
	Message string         `json:"message,omitempty"`
	Ingress []RouteIngress `json:"ingress,omitempty"`
}

// RouteIngress is the route's admission on one router.
type RouteIngress struct {
	Router                  string           `json:"router"`
	Host                    string           `json:"host,omitempty"`
	RouterCanonicalHostname string           `json:"routerCanonicalHostname,omitempty"`
	WildcardPolicy          string           `json:"wildcardPolicy,omitempty"`
	Conditions              []RouteCondition `json:"conditions,omitempty"`
}

// RouteCondition is one condition (type Admitted).
type RouteCondition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"` // True | False
	Reason             string    `json:"reason,omitempty"`
	Message            string    `json:"message,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime,omitempty"`
}

// RouteBinding binds one route to one router; creating it is the only way a route's phase
// and dns are set.
type RouteBinding struct {
	Meta
	RouteNamespace string `json:"routeNamespace"`
	RouteName      string `json:"routeName"`
	Router         string `json:"router"`
	DNS            string `json:"dns"`
}

func (*Router) Kind() string       { return KindRouter }
func (*Route) Kind() string        { return KindRoute }
func (*RouteBinding) Kind() string { return KindRouteBinding }

// RouteKeyName is the name a route (and its binding) is stored under: name.namespace (a
// namespace is one DNS label, so the last dot splits it back).
func RouteKeyName(namespace, name string) string { return name + "." + namespace }

// StoreName is the name a resource is known by within its mesh and kind (stored, served to
// agents and addressed in URLs under): its name, and for a Route or RouteBinding
// name.namespace, since a route is named within its namespace.
func StoreName(r Resource) string {
	switch r := r.(type) {
	case *Route:
		return RouteKeyName(r.Namespace, r.Name)
	case *RouteBinding:
		return RouteKeyName(r.RouteNamespace, r.RouteName)
	}
	return r.GetMeta().Name
}

// DNSTypeOf is the route's DNS type with the default applied.
func (r *Route) DNSTypeOf() string {
	if r.DNSType == "" {
		return DNSTypeSystem
	}
	return r.DNSType
}

// WildcardPolicyOf is the route's wildcard policy with the default applied.
func (r *Route) WildcardPolicyOf() string {
	if r.WildcardPolicy == "" {
		return WildcardNone
	}
	return r.WildcardPolicy
}

// PhaseOf is the route's phase (new when it has no status).
func (r *Route) PhaseOf() string {
	if r.Status == nil || r.Status.Phase == "" {
		return PhaseNew
	}
	return r.Status.Phase
}

// Admitted reports whether the route is admitted on the router it is scheduled onto (its
// Admitted condition there is True).
func (r *Route) Admitted() bool {
	if r.Status == nil || r.Status.Router == "" {
		return false
	}
	for _, ing := range r.Status.Ingress {
		if ing.Router != r.Status.Router {
			continue
		}
		for _, c := range ing.Conditions {
			if c.Type == "Admitted" {
				return c.Status == "True"
			}
		}
	}
	return false
}

// ServedName is the name the route is served under on its router: its final DNS name
// (status.dns, the host for a user route), or "*.<domain>" for a Subdomain wildcard route
// on www.<domain> (or *.<domain>). Empty while the route has no final name.
func (r *Route) ServedName() string {
	name := r.Host
	if r.Status != nil && r.Status.DNS != "" {
		name = r.Status.DNS
	} else if r.DNSTypeOf() == DNSTypeSystem {
		return ""
	}
	if r.WildcardPolicyOf() == WildcardSubdomain {
		if i := strings.IndexByte(name, '.'); i > 0 {
			return "*" + name[i:]
		}
	}
	return name
}
