package xds

import (
	"encoding/json"
	"slices"
	"sort"

	"github.com/kumadp/kuma-dp/mesh"
)

// Kuma 2.x's route policies (MeshTCPRoute, MeshHTTPRoute) on this dataplane's outbounds.
//
// A policy applies when its spec.targetRef selects this dataplane; the ones that do are
// ordered as Kuma merges them: by the targetRef's specificity (Mesh, MeshSubset,
// MeshService, MeshServiceSubset, Dataplane by labels, Dataplane by name), then by name,
// each later one overriding the earlier. A to[].targetRef names the outbound: a MeshService
// (its ports, or the one sectionName names), else, when no MeshService has the name, the
// kuma.io/service of the older API; or a MeshExternalService. For an outbound, MeshHTTPRoutes' rules are merged by
// their matches (the same matches: the later policy's default replaces the earlier's), and
// apply when the destination speaks HTTP (appProtocol, or kuma.io/protocol, http, http2 or
// grpc); otherwise the last MeshTCPRoute's backendRefs apply. Either beats a TrafficRoute
// of the same outbound, as in Kuma. meshhttp.go turns the result into Envoy's resources.

// kumaPolicy is one route policy selecting this dataplane.
type kumaPolicy struct {
	name string
	rank int
	tcp  *mesh.MeshTCPRoute
	http *mesh.MeshHTTPRoute
}

// kumaRoutes holds the route policies selecting this dataplane, in merge order, indexed by
// the names their to[].targetRefs give (byName; refs by labels in byLabels), and the
// MeshServices by their names and display names (named).
type kumaRoutes struct {
	s        *mesh.Snapshot
	policies []kumaPolicy
	services map[string]*mesh.MeshService
	named    map[string][]*mesh.MeshService
	byName   map[string][]int
	byLabels []int
}

// Specificity of a top-level targetRef (Kuma's order; higher wins).
func refRank(r *mesh.PolicyRef) int {
	if r == nil {
		return 0
	}
	switch r.Kind {
	case mesh.RefMeshSubset:
		return 1
	case mesh.KindMeshService:
		return 2
	case mesh.RefMeshServiceSubset:
		return 3
	case mesh.RefDataplane:
		if r.Name != "" {
			return 5
		}
		return 4
	}
	return 0
}

func newKumaRoutes(s *mesh.Snapshot) *kumaRoutes {
	k := &kumaRoutes{s: s, services: make(map[string]*mesh.MeshService, len(s.MeshServices)),
		named: make(map[string][]*mesh.MeshService, len(s.MeshServices)), byName: map[string][]int{}}
	for _, ms := range s.MeshServices {
		k.services[ms.Name] = ms
		k.named[ms.Name] = append(k.named[ms.Name], ms)
		if dn := ms.Labels()[mesh.DisplayNameLabel]; dn != "" && dn != ms.Name {
			k.named[dn] = append(k.named[dn], ms)
		}
	}
	for _, r := range s.MeshTCPRoutes {
		if k.selectsSelf(r.Spec.TargetRef) {
			k.policies = append(k.policies, kumaPolicy{name: r.Name,
				rank: refRank(r.Spec.TargetRef), tcp: r})
		}
	}
	for _, r := range s.MeshHTTPRoutes {
		if k.selectsSelf(r.Spec.TargetRef) {
			k.policies = append(k.policies, kumaPolicy{name: r.Name,
				rank: refRank(r.Spec.TargetRef), http: r})
		}
	}
	sort.SliceStable(k.policies, func(i, j int) bool {
		a, b := k.policies[i], k.policies[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		return a.name < b.name
	})
	for i, p := range k.policies {
		for _, r := range p.toRefs() {
			if r.Name == "" {
				k.byLabels = appendOnce(k.byLabels, i)
			} else {
				k.byName[r.Name] = appendOnce(k.byName[r.Name], i)
			}
		}
	}
	return k
}

// toRefs are a policy's to[].targetRefs.
func (p *kumaPolicy) toRefs() []*mesh.PolicyRef {
	var out []*mesh.PolicyRef
	if p.tcp != nil {
		for i := range p.tcp.Spec.To {
			out = append(out, &p.tcp.Spec.To[i].TargetRef)
		}
	}
	if p.http != nil {
		for i := range p.http.Spec.To {
			out = append(out, &p.http.Spec.To[i].TargetRef)
		}
	}
	return out
}

func appendOnce(is []int, i int) []int {
	if len(is) > 0 && is[len(is)-1] == i {
		return is
	}
	return append(is, i)
}

// candidates are the policies (indices, in merge order) whose to[].targetRefs may select
// outbound ob: those naming it, and those selecting by labels.
func (k *kumaRoutes) candidates(ob outboundKey) []int {
	out := slices.Clone(k.byLabels)
	out = append(out, k.byName[ob.name]...)
	if ms := k.services[ob.name]; ob.kind == "ms" && ms != nil {
		if dn := ms.Labels()[mesh.DisplayNameLabel]; dn != "" && dn != ms.Name {
			out = append(out, k.byName[dn]...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// selectsSelf reports whether a top-level targetRef selects this dataplane.
func (k *kumaRoutes) selectsSelf(r *mesh.PolicyRef) bool {
	self := k.s.Self
	if r == nil || r.Kind == mesh.RefMesh {
		return true
	}
	anyInbound := func(ok func(in *mesh.Inbound) bool) bool {
		for i := range self.Networking.Inbound {
			if in := &self.Networking.Inbound[i]; !in.Ignored() && ok(in) {
				return true
			}
		}
		return false
	}
	switch r.Kind {
	case mesh.RefMeshSubset:
		return anyInbound(func(in *mesh.Inbound) bool { return r.Tags.Matches(in.Tags) })
	case mesh.KindMeshService, mesh.RefMeshServiceSubset:
		return anyInbound(func(in *mesh.Inbound) bool {
			if len(r.Tags) > 0 && !r.Tags.Matches(in.Tags) {
				return false
			}
			if in.Tags.Value(mesh.ServiceTag) == r.Name && r.Name != "" {
				return true
			}
			cands := k.s.MeshServices
			if r.Name != "" {
				cands = k.named[r.Name]
			}
			for _, ms := range cands {
				if refNames(r, ms) && ms.SelectsInbound(self, in) {
					return true
				}
			}
			return false
		})
	case mesh.RefDataplane:
		if r.Name != "" {
			name := r.Name
			if r.Namespace != "" {
				name += "." + r.Namespace
			}
			return self.Name == name || self.Name == r.Name
		}
		return mesh.LabelsMatch(r.Labels, self.Labels())
	}
	return false
}

// refNames reports whether a targetRef (of kind MeshService) names MeshService ms: by
// name (Kuma's, or the name it was written with) and, when the ref gives one, namespace; or
// by labels.
func refNames(r *mesh.PolicyRef, ms *mesh.MeshService) bool {
	if r.Name == "" {
		return len(r.Labels) > 0 && mesh.LabelsMatch(r.Labels, ms.Labels())
	}
	if ms.Name != r.Name && ms.Labels()[mesh.DisplayNameLabel] != r.Name {
		return false
	}
	return r.Namespace == "" || ms.Labels()[mesh.NamespaceLabel] == r.Namespace
}

// outboundKey names what a to[].targetRef can select: a MeshService's port ("ms" with the
// service and the port's number), a kuma.io/service ("svc") or a MeshExternalService
// ("mes").
type outboundKey struct {
	kind, name string
	port       uint32
}

// selects reports whether a to[].targetRef r selects outbound ob.
func (k *kumaRoutes) selects(r *mesh.PolicyRef, ob outboundKey) bool {
	if r.Kind == mesh.KindMeshExternalService || ob.kind == "mes" {
		return r.Kind == mesh.KindMeshExternalService && ob.kind == "mes" && r.Name == ob.name
	}
	if r.Kind != mesh.KindMeshService {
		return false
	}
	if ob.kind == "svc" {
		// The older form: a name no MeshService has is a kuma.io/service.
		if r.Name != ob.name || len(r.Labels) > 0 {
			return false
		}
		for _, ms := range k.named[r.Name] {
			if refNames(r, ms) {
				return false
			}
		}
		return true
	}
	ms := k.services[ob.name]
	if ms == nil || !refNames(r, ms) {
		return false
	}
	if r.SectionName == "" {
		return true
	}
	port := ms.FindPort(r.SectionName)
	return port != nil && port.Port == ob.port
}

// mergedRule is one HTTP rule after merging: its matches (the key) and default, with the
// policy it came from last.
type mergedRule struct {
	matches []mesh.HTTPRouteMatch
	def     mesh.RouteDefault
	policy  string
	key     string
}

// kumaOutbound is what the route policies make of one outbound: HTTP rules, or TCP
// backendRefs (tcp true), or nothing (neither).
type kumaOutbound struct {
	http     []mergedRule
	tcp      bool
	backends []mesh.RouteBackendRef
	tcpFrom  string // the MeshTCPRoute giving backends
}

// forOutbound merges the policies for outbound ob; isHTTP says whether its destination
// speaks HTTP (MeshHTTPRoutes apply only then).
func (k *kumaRoutes) forOutbound(ob outboundKey, isHTTP bool) (kumaOutbound, bool) {
	var out kumaOutbound
	byKey := map[string]int{}
	for _, i := range k.candidates(ob) {
		p := &k.policies[i]
		switch {
		case p.http != nil && isHTTP:
			for _, to := range p.http.Spec.To {
				if !k.selects(&to.TargetRef, ob) {
					continue
				}
				for _, rule := range to.Rules {
					key := matchesKey(rule.Matches)
					m := mergedRule{matches: rule.Matches, def: rule.Default, policy: p.name, key: key}
					if j, ok := byKey[key]; ok {
						m.def = mergeDefault(out.http[j].def, rule.Default)
						out.http[j] = m
						continue
					}
					byKey[key] = len(out.http)
					out.http = append(out.http, m)
				}
			}
		case p.tcp != nil:
			for _, to := range p.tcp.Spec.To {
				if k.selects(&to.TargetRef, ob) && len(to.Rules) > 0 {
					out.tcp, out.tcpFrom = true, p.name
					out.backends = to.Rules[0].Default.BackendRefs
				}
			}
		}
	}
	if len(out.http) > 0 {
		// MeshHTTPRoute beats MeshTCPRoute on an HTTP destination (Kuma's rule).
		out.tcp, out.backends, out.tcpFrom = false, nil, ""
		sortRules(out.http)
		return out, true
	}
	return out, out.tcp
}

// mergeDefault is Kuma's merge of two rules' defaults (JSON merge patch): what the later
// gives replaces the earlier's.
func mergeDefault(a, b mesh.RouteDefault) mesh.RouteDefault {
	if b.BackendRefs != nil {
		a.BackendRefs = b.BackendRefs
	}
	if b.Filters != nil {
		a.Filters = b.Filters
	}
	return a
}

// matchesKey is a rule's matches as a map key (Kuma keys rules by their matches).
func matchesKey(ms []mesh.HTTPRouteMatch) string {
	b, _ := json.Marshal(ms)
	return string(b)
}

// sortRules orders HTTP rules as Kuma (and the Gateway API) orders their routes, most
// specific first: by the best match of each rule - an Exact path before a PathPrefix (the
// longer prefix first; no path is the prefix "/") before a RegularExpression; then a
// method; then more headers; then more query parameters; rules equal on all of these keep
// their merge order.
func sortRules(rules []mergedRule) {
	score := func(r mergedRule) [5]int {
		best := [5]int{}
		for _, m := range r.matches {
			s := [5]int{2, 1} // no path is PathPrefix "/"
			if p := m.Path; p != nil {
				switch p.Type {
				case "Exact":
					s[0], s[1] = 3, len(p.Value)
				case "PathPrefix":
					s[0], s[1] = 2, len(p.Value)
				case "RegularExpression":
					s[0] = 1
				}
			}
			if m.Method != "" {
				s[2] = 1
			}
			s[3], s[4] = len(m.Headers), len(m.QueryParams)
			if slices.Compare(s[:], best[:]) > 0 {
				best = s
			}
		}
		return best
	}
	sort.SliceStable(rules, func(i, j int) bool {
		a, b := score(rules[i]), score(rules[j])
		return slices.Compare(a[:], b[:]) > 0
	})
}

// backendError is a backendRef that names nothing this dataplane knows.
type backendError struct{ field, msg string }
