package routing

import (
	"fmt"
	"strings"

	"golang.org/x/net/publicsuffix"

	"github.com/kumadp/kuma-dp/mesh"
)

// The names a user route may claim. Route writers are not trusted, and one DNS (the control
// plane's, and every agent's resolver) answers every mesh's route names: a user route on
// api.github.com or in-addr.arpa would otherwise rewrite public names. So a user name lies
// inside a domain the operator gave - a users' zone (kuma-cp serve --dns-user-zone) or a
// router's zone (its dns) - and is never a public suffix, a top-level domain or in arpa.

// CheckUserZone refuses a users' zone an operator may not give: not a domain name, a
// top-level domain, a public suffix (com, co.uk, github.io: the Public Suffix List) or a
// name in arpa (reverse lookups).
func CheckUserZone(zone string) error {
	z := strings.ToLower(strings.TrimSuffix(zone, "."))
	if err := mesh.CheckDNSName(z); err != nil {
		return fmt.Errorf("users' zone %q: %v", zone, err)
	}
	if why := publicName(z); why != "" {
		return fmt.Errorf("users' zone %q: %s; give a domain of your own (acme.example.com)", zone, why)
	}
	return nil
}

// publicName says why name is not a user's to claim ("" when it is).
func publicName(name string) string {
	switch {
	case name == "arpa" || strings.HasSuffix(name, ".arpa"):
		return "a name in arpa (reverse lookups) is not a user's"
	case !strings.Contains(name, "."):
		return "a top-level domain is not a user's"
	}
	if suffix, _ := publicsuffix.PublicSuffix(name); suffix == name {
		return "a public suffix (on the Public Suffix List) is not a user's"
	}
	return ""
}

// CheckUserName refuses (RouteNotAdmitted) a user route whose name - its host, or for a
// Subdomain wildcard the domain it covers - is a public suffix, a top-level domain or in
// arpa, or lies inside none of zones (the users' zones) and in no router's zone (routers,
// of every mesh). Other routes pass.
func CheckUserName(r *mesh.Route, zones []string, routers []*mesh.Router) *Error {
	if r.DNSTypeOf() != mesh.DNSTypeUser {
		return nil
	}
	name := strings.ToLower(strings.TrimSuffix(r.Host, "."))
	what := "host " + r.Host
	if r.WildcardPolicyOf() == mesh.WildcardSubdomain {
		_, name = splitHost(name)
		what = "the wildcard *." + name + " (host " + r.Host + ")"
	}
	if why := publicName(name); why != "" {
		return &Error{Reason: mesh.ReasonRouteNotAdmitted, Message: fmt.Sprintf("%s: %s", what, why)}
	}
	for _, z := range zones {
		z = strings.ToLower(strings.TrimSuffix(z, "."))
		if name == z || strings.HasSuffix(name, "."+z) {
			return nil
		}
	}
	if owner, _ := ZoneOwner(routers, r); owner != nil {
		zone := strings.ToLower(strings.TrimSuffix(owner.DNS, "."))
		if why := publicName(zone); why != "" {
			return &Error{Reason: mesh.ReasonRouteNotAdmitted, Message: fmt.Sprintf("%s is in router %s's zone %s, which is not a domain of the operator's: %s", what, owner.Name, owner.DNS, why)}
		}
		return nil
	}
	given := "none given"
	if len(zones) > 0 {
		given = strings.Join(zones, ", ")
	}
	return &Error{Reason: mesh.ReasonRouteNotAdmitted, Message: fmt.Sprintf("%s is in no users' zone (kuma-cp serve --dns-user-zone: %s) and in no router's zone: a user name must be in a domain the operator gave", what, given)}
}
