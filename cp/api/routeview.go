package api

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kumadp/kuma-dp/cp/routesched"
	"github.com/kumadp/kuma-dp/mesh"
)

// The views of router shards: kuma-cp get routers|routes, describe router|route.

// decodeAs decodes API resources of one kind (those that do not decode are skipped).
func decodeAs[T mesh.Resource](rs []Resource) []T {
	var out []T
	for _, r := range rs {
		got, err := mesh.Decode(r.Mesh+"/"+r.Type+"/"+r.Name, r.Document())
		if err != nil || len(got) != 1 {
			continue
		}
		if t, ok := got[0].(T); ok {
			if m := got[0].GetMeta(); !r.CreationTime.IsZero() || m.CreationTime().IsZero() {
				m.SetCreationTime(r.CreationTime) // the store's, as the scheduler's (not the document's)
			}
			out = append(out, t)
		}
	}
	return out
}

func admitted(r *mesh.Route) string {
	if r.Status == nil || len(r.Status.Ingress) == 0 {
		return "-"
	}
	c := r.Status.Ingress[0].Conditions
	if len(c) == 0 {
		return "-"
	}
	if c[0].Status == "True" {
		return "True"
	}
	return "False (" + c[0].Reason + ")"
}

// PrintRouters is `get routers`: name, dns, selector, namespaces, ready/desired replicas and
// the conditions, as the router's status says (its DNS serves the same), and routes.
func PrintRouters(w io.Writer, routers, routes []Resource) error {
	rts, rs := decodeAs[*mesh.Router](routers), decodeAs[*mesh.Route](routes)
	count := map[string]int{}
	for _, r := range rs {
		if r.PhaseOf() == mesh.PhaseScheduled {
			count[r.Status.Router]++
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDNS\tSELECTOR\tNAMESPACES\tREADY\tAVAILABLE\tDEGRADED\tROUTES")
	for _, rt := range rts {
		ns := strings.Join(rt.NamespaceSelector, ",")
		if ns == "" {
			ns = "<all>"
		}
		ready := 0
		if rt.Status != nil {
			ready = rt.Status.ReadyReplicas
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%d\n", rt.Name, rt.DNS, cmp.Or(mesh.LabelsText(rt.RouteSelector), "<all>"), ns, ready, rt.DesiredReplicas(),
			conditionStatus(rt.Status, mesh.ConditionAvailable), conditionStatus(rt.Status, mesh.ConditionDegraded), count[rt.Name])
	}
	return tw.Flush()
}

// conditionStatus is a router condition's status, Unknown before the control plane wrote it.
func conditionStatus(s *mesh.RouterStatus, typ string) string {
	if c := s.Condition(typ); c != nil {
		return c.Status
	}
	return "Unknown"
}

// PrintRoutes is `get routes`: namespace, name, host, type, router, phase, final DNS,
// admitted, age.
func PrintRoutes(w io.Writer, routes []Resource, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tNAME\tHOST\tTYPE\tROUTER\tPHASE\tDNS\tADMITTED\tAGE")
	for _, r := range decodeAs[*mesh.Route](routes) {
		router, dns := "-", "-"
		if s := r.Status; s != nil && s.Router != "" {
			router, dns = s.Router, s.DNS
		}
		fmt.Fprintf(tw, "%s\t%s\t%s%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Namespace, r.Name, r.Host, r.Path, r.DNSTypeOf(), router, r.PhaseOf(), dns, admitted(r), Age(r.CreationTime(), now))
	}
	return tw.Flush()
}

// DescribeRoute is `describe route`: spec, binding, why it is not scheduled, conditions.
func DescribeRoute(w io.Writer, route Resource, bindings []Resource) error {
	rs := decodeAs[*mesh.Route]([]Resource{route})
	if len(rs) == 0 {
		return fmt.Errorf("route %s does not decode", route.Name)
	}
	r := rs[0]
	fmt.Fprintf(w, "Name:            %s\nNamespace:       %s\nMesh:            %s\nLabels:          %s\n", r.Name, r.Namespace, route.Mesh, cmp.Or(mesh.LabelsText(r.Labels()), "<all>"))
	fmt.Fprintf(w, "Host:            %s\nPath:            %s\nDNS type:        %s\nWildcard policy: %s\nTo:              %s:%d\n", r.Host, r.Path, r.DNSTypeOf(), r.WildcardPolicyOf(), r.To.Service, r.To.Port)
	fmt.Fprintf(w, "Phase:           %s\n", r.PhaseOf())
	s := r.Status
	if s == nil {
		s = &mesh.RouteStatus{}
	}
	if s.Reason != "" {
		fmt.Fprintf(w, "Not scheduled:   %s: %s\n", s.Reason, s.Message)
	}
	if s.Router != "" {
		fmt.Fprintf(w, "Router:          %s\nDNS:             %s\n", s.Router, s.DNS)
		if r.DNSTypeOf() == mesh.DNSTypeUser {
			fmt.Fprintf(w, "Point your DNS:  %s CNAME %s\n", r.Host, s.RouterCanonicalHostname)
		}
	}
	for _, b := range decodeAs[*mesh.RouteBinding](bindings) {
		if b.RouteNamespace == r.Namespace && b.RouteName == r.Name {
			fmt.Fprintf(w, "Binding:         %s -> router %s, dns %s\n", b.Name, b.Router, b.DNS)
		}
	}
	for _, in := range s.Ingress {
		for _, c := range in.Conditions {
			fmt.Fprintf(w, "Condition:       router %s: %s=%s", in.Router, c.Type, c.Status)
			if c.Reason != "" {
				fmt.Fprintf(w, " %s: %s", c.Reason, c.Message)
			}
			fmt.Fprintln(w)
		}
	}
	return nil
}

// DescribeRouter is `describe router`: its selectors, DNS, listener, replicas with their
// readiness and the reason of each not ready, conditions (its status: what its DNS
// serves), routes.
func DescribeRouter(w io.Writer, router Resource, routes []Resource) error {
	rts := decodeAs[*mesh.Router]([]Resource{router})
	if len(rts) == 0 {
		return fmt.Errorf("router %s does not decode", router.Name)
	}
	rt := rts[0]
	fmt.Fprintf(w, "Name:             %s\nDescription:      %s\nDNS:              %s (system routes: <namespace>-<host>.%s)\n", rt.Name, rt.Description, rt.DNS, rt.DNS)
	// Users' own domains CNAME to a name the shard's wildcard answers, never its apex (RFC
	// 4592: the apex is not covered by its own wildcard).
	fmt.Fprintf(w, "CNAME target:     %s (user domains: <your name> CNAME %s)\n", routesched.Canonical(rt), routesched.Canonical(rt))
	fmt.Fprintf(w, "Route selector:   %s\nNamespaces:       %s\nAdmission:        namespace ownership %s, wildcards %s\n", cmp.Or(mesh.LabelsText(rt.RouteSelector), "<all>"), strings.Join(append([]string{}, rt.NamespaceSelector...), ","),
		orDefault(rt.RouteAdmission.NamespaceOwnership, mesh.NamespaceOwnershipStrict), orDefault(rt.RouteAdmission.WildcardPolicy, mesh.WildcardsDisallowed))
	l := rt.ListenerOf()
	fmt.Fprintf(w, "Listener:         %s on port %d\n", l.Protocol, l.Port)
	describeReplicas(w, rt)
	var bound []string
	for _, r := range decodeAs[*mesh.Route](routes) {
		if r.PhaseOf() == mesh.PhaseScheduled && r.Status.Router == rt.Name {
			bound = append(bound, fmt.Sprintf("  %s/%s\t%s\t%s", r.Namespace, r.Name, r.Status.DNS, admitted(r)))
		}
	}
	fmt.Fprintf(w, "Routes:           %d\n", len(bound))
	for _, b := range bound {
		fmt.Fprintln(w, b)
	}
	return nil
}

// describeReplicas prints the router's replicas and conditions as its status says.
func describeReplicas(w io.Writer, rt *mesh.Router) {
	s := rt.Status
	if s == nil {
		fmt.Fprintf(w, "Replicas:         %s, %d desired; readiness not written yet (the leader writes it)\n", cmp.Or(mesh.LabelsText(rt.Dataplanes.Map()), "<all>"), rt.DesiredReplicas())
		return
	}
	fmt.Fprintf(w, "Replicas:         %s, %d desired, %d ready of %d\n", cmp.Or(mesh.LabelsText(rt.Dataplanes.Map()), "<all>"), s.DesiredReplicas, s.ReadyReplicas, len(s.Replicas))
	for _, r := range s.Replicas {
		st := "ready"
		if !r.Ready {
			st = "not ready: " + r.Reason + ": " + r.Message
		}
		fmt.Fprintf(w, "  %s\t%s\t%s\n", r.Name, r.Address, st)
	}
	for _, c := range s.Conditions {
		fmt.Fprintf(w, "Condition:        %s=%s %s: %s (since %s)\n", c.Type, c.Status, c.Reason, c.Message, c.LastTransitionTime.Format(time.RFC3339))
	}
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// RouteState is a route's scheduling state as `apply --wait` reports it.
type RouteState struct {
	Scheduled       bool
	Router, DNS     string
	Canonical       string
	Reason, Message string
	Admitted        string
	// User: the route's host is the user's own (dnsType user): it must CNAME to Canonical.
	User bool
}

// RouteStateOf reads a route resource's state.
func RouteStateOf(r Resource) (RouteState, error) {
	rs := decodeAs[*mesh.Route]([]Resource{r})
	if len(rs) == 0 {
		return RouteState{}, fmt.Errorf("route %s does not decode", r.Name)
	}
	rt := rs[0]
	st := RouteState{Admitted: admitted(rt), User: rt.DNSType == mesh.DNSTypeUser}
	if s := rt.Status; s != nil {
		st.Scheduled = s.Phase == mesh.PhaseScheduled
		st.Router, st.DNS, st.Canonical, st.Reason, st.Message = s.Router, s.DNS, s.RouterCanonicalHostname, s.Reason, s.Message
	}
	return st, nil
}
