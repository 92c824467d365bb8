package mesh

import (
	"fmt"
	"strings"

	"github.com/kumadp/kuma-dp/internal/errtext"
)

// Validation of Router, Route and RouteBinding: names are DNS-1123 (lower-case letters,
// digits and '-', each label 1-63 characters starting and ending with a letter or digit,
// the whole name at most 253).

// MaxDNSLabel and MaxDNSName are DNS-1123's limits.
const (
	MaxDNSLabel = 63
	MaxDNSName  = 253
)

// CheckDNSLabel checks one DNS-1123 label.
func CheckDNSLabel(s string) error {
	if s == "" {
		return fmt.Errorf("empty label")
	}
	if len(s) > MaxDNSLabel {
		return fmt.Errorf("label %q is %d characters, more than %d", errtext.Clip(s, 80), len(s), MaxDNSLabel)
	}
	if c, bad := firstNotAllowed(s, func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' }); bad {
		return fmt.Errorf("label %q: character %q not allowed (lower-case letters, digits and '-')", errtext.Clip(s, 80), c)
	}
	if s[0] == '-' || s[len(s)-1] == '-' {
		return fmt.Errorf("label %q must start and end with a letter or digit", s)
	}
	return nil
}

// CheckDNSName checks a DNS-1123 name (labels separated by dots, no trailing dot).
func CheckDNSName(s string) error {
	if s == "" {
		return fmt.Errorf("required")
	}
	if len(s) > MaxDNSName {
		return fmt.Errorf("%d characters, more than %d", len(s), MaxDNSName)
	}
	for l := range strings.SplitSeq(s, ".") {
		if err := CheckDNSLabel(l); err != nil {
			return err
		}
	}
	return nil
}

func (v *validator) labelMap(path string, m map[string]string) {
	for _, k := range sortedTagKeys(m) {
		if k == "" {
			v.errorf(path, "", "empty label key")
		}
	}
}

func (v *validator) router(r *Router) {
	if err := CheckDNSName(r.DNS); err != nil {
		v.errorf("dns", r.DNS, "%v", err)
	}
	v.labelMap("routeSelector", r.RouteSelector)
	for i, ns := range r.NamespaceSelector {
		if ns == Wildcard {
			continue
		}
		if err := CheckDNSLabel(ns); err != nil {
			v.errorf(indexPath("namespaceSelector", i), ns, "a namespace: %v", err)
		}
	}
	if r.Dataplanes.Has("") {
		v.errorf("dataplanes", "", "empty label key")
	}
	switch r.RouteAdmission.NamespaceOwnership {
	case "", NamespaceOwnershipStrict, NamespaceOwnershipAllowed:
	default:
		v.errorf("routeAdmission.namespaceOwnership", r.RouteAdmission.NamespaceOwnership, "must be %s or %s", NamespaceOwnershipStrict, NamespaceOwnershipAllowed)
	}
	switch r.RouteAdmission.WildcardPolicy {
	case "", WildcardsDisallowed, WildcardsAllowed:
	default:
		v.errorf("routeAdmission.wildcardPolicy", r.RouteAdmission.WildcardPolicy, "must be %s or %s", WildcardsDisallowed, WildcardsAllowed)
	}
	if r.Replicas != nil && (*r.Replicas < 0 || *r.Replicas > MaxRouterReplicas) {
		v.errorf("replicas", fmt.Sprint(*r.Replicas), "must be 0 to %d", MaxRouterReplicas)
	}
	if l := r.Listener; l != nil {
		if l.Port > 65535 {
			v.errorf("listener.port", fmt.Sprint(l.Port), "must be 1 to 65535")
		}
		switch l.Protocol {
		case "", ProtocolHTTP:
		default:
			v.errorf("listener.protocol", l.Protocol, "must be %s (the routers' gateways serve HTTP)", ProtocolHTTP)
		}
	}
}

// MaxRouterReplicas is the most replicas a router may ask for.
const MaxRouterReplicas = 100

func (v *validator) route(r *Route) {
	if err := CheckDNSLabel(r.Namespace); err != nil {
		v.errorf("namespace", r.Namespace, "%v", err)
	}
	switch r.DNSType {
	case "", DNSTypeSystem, DNSTypeUser:
	default:
		v.errorf("dnsType", r.DNSType, "must be %s or %s", DNSTypeSystem, DNSTypeUser)
	}
	switch r.WildcardPolicy {
	case "", WildcardNone, WildcardSubdomain:
	default:
		v.errorf("wildcardPolicy", r.WildcardPolicy, "must be %s or %s", WildcardNone, WildcardSubdomain)
	}
	host := r.Host
	if h, ok := strings.CutPrefix(host, "*."); ok && r.WildcardPolicy == WildcardSubdomain {
		host = "x." + h // *.acme.test with policy Subdomain is acme.test's wildcard
	}
	if err := CheckDNSName(host); err != nil {
		v.errorf("host", r.Host, "%v", err)
	} else if r.DNSTypeOf() == DNSTypeSystem {
		// The final name is <namespace>-<host>.<router dns>: its first label must fit.
		first, _, _ := strings.Cut(host, ".")
		if l := len(r.Namespace) + 1 + len(first); r.Namespace != "" && l > MaxDNSLabel {
			v.errorf("host", r.Host, "with dnsType system the first label of the name is <namespace>-<host> (%q), %d characters, more than %d", errtext.Clip(r.Namespace+"-"+first, 80), l, MaxDNSLabel)
		}
		if r.WildcardPolicy == WildcardSubdomain {
			v.errorf("wildcardPolicy", r.WildcardPolicy, "a wildcard needs a host the user owns: dnsType user")
		}
	}
	if r.Path != "" && !strings.HasPrefix(r.Path, "/") {
		v.errorf("path", r.Path, "must start with /")
	}
	if r.To.Service == "" {
		v.errorf("to.service", "", "required (the mesh service the route exposes)")
	}
	v.port("to.port", r.To.Port, true)
	if s := r.Status; s != nil {
		switch s.Phase {
		case "", PhaseNew, PhaseScheduled:
		default:
			v.errorf("status.phase", s.Phase, "must be %s or %s", PhaseNew, PhaseScheduled)
		}
		if s.DNS != "" {
			if err := CheckDNSName(s.DNS); err != nil {
				v.errorf("status.dns", s.DNS, "%v", err)
			}
		}
	}
}

func (v *validator) routeBinding(b *RouteBinding) {
	if err := CheckDNSLabel(b.RouteNamespace); err != nil {
		v.errorf("routeNamespace", b.RouteNamespace, "%v", err)
	}
	if err := checkName(b.RouteName); err != nil {
		v.errorf("routeName", b.RouteName, "%v", err)
	}
	if err := checkName(b.Router); err != nil {
		v.errorf("router", b.Router, "%v", err)
	}
	if err := CheckDNSName(b.DNS); err != nil {
		v.errorf("dns", b.DNS, "%v", err)
	}
}
