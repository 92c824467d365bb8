package mesh

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Kuma 2.x's route policies: MeshTCPRoute and MeshHTTPRoute, with targetRef (which
// dataplanes the policy configures) and to[].targetRef (which outbound), their rules'
// backendRefs and, for HTTP, matches and filters. The agent applies them to its own
// outbounds (package xds); this file holds their types and checks.

// Kind names of Kuma 2.x's resources acted on here.
const (
	KindMeshTCPRoute  = "MeshTCPRoute"
	KindMeshHTTPRoute = "MeshHTTPRoute"
)

// Kinds a policy's targetRef (and backendRef) may name.
const (
	RefMesh              = "Mesh"
	RefMeshSubset        = "MeshSubset"
	RefMeshServiceSubset = "MeshServiceSubset"
	RefDataplane         = "Dataplane"
)

// PolicyRef is Kuma's targetRef: a kind and, by kind, a name (with a namespace), labels,
// tags (subsets) or a sectionName (a port's name, or an inbound's).
type PolicyRef struct {
	Kind        string            `json:"kind"`
	Name        string            `json:"name,omitempty"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Tags        Tags              `json:"tags,omitempty"`
	SectionName string            `json:"sectionName,omitempty"`
	Mesh        string            `json:"mesh,omitempty"`
	ProxyTypes  []string          `json:"proxyTypes,omitempty"`
}

// RouteBackendRef is one rules[].default.backendRefs element: PolicyRef's kind
// MeshService (a MeshService, or a kuma.io/service of the older API), MeshServiceSubset
// (a service's dataplanes with tags) or MeshExternalService; a port for a MeshService
// with several; a weight (default 1; 0 sends nothing).
type RouteBackendRef struct {
	PolicyRef
	Port   uint32  `json:"port,omitempty"`
	Weight *uint32 `json:"weight,omitempty"`
}

// WeightOr1 is the backendRef's weight, 1 when not given.
func (b *RouteBackendRef) WeightOr1() uint32 {
	if b.Weight == nil {
		return 1
	}
	return *b.Weight
}

// MeshTCPRoute is Kuma's MeshTCPRoute. Namespace is the Kubernetes form's
// metadata.namespace, kept (a to[].targetRef names a MeshService by its name, and by its
// namespace only when the ref gives one).
type MeshTCPRoute struct {
	Meta
	Namespace string           `json:"namespace,omitempty"`
	Spec      MeshTCPRouteSpec `json:"spec"`
}

// MeshTCPRouteSpec is MeshTCPRoute.spec.
type MeshTCPRouteSpec struct {
	TargetRef *PolicyRef       `json:"targetRef,omitempty"`
	To        []MeshTCPRouteTo `json:"to"`
}

// MeshTCPRouteTo is one spec.to element.
type MeshTCPRouteTo struct {
	TargetRef PolicyRef          `json:"targetRef"`
	Rules     []MeshTCPRouteRule `json:"rules"`
}

// MeshTCPRouteRule is one rule: its default's backendRefs.
type MeshTCPRouteRule struct {
	Default RouteDefault `json:"default"`
}

// RouteDefault is a rule's default: where the traffic goes and (HTTP) what is done to it.
type RouteDefault struct {
	BackendRefs []RouteBackendRef `json:"backendRefs,omitempty"`
	Filters     []HTTPRouteFilter `json:"filters,omitempty"`
}

// MeshHTTPRoute is Kuma's MeshHTTPRoute (Namespace as MeshTCPRoute's).
type MeshHTTPRoute struct {
	Meta
	Namespace string            `json:"namespace,omitempty"`
	Spec      MeshHTTPRouteSpec `json:"spec"`
}

// MeshHTTPRouteSpec is MeshHTTPRoute.spec.
type MeshHTTPRouteSpec struct {
	TargetRef *PolicyRef        `json:"targetRef,omitempty"`
	To        []MeshHTTPRouteTo `json:"to"`
}

// MeshHTTPRouteTo is one spec.to element.
type MeshHTTPRouteTo struct {
	TargetRef PolicyRef           `json:"targetRef"`
	Rules     []MeshHTTPRouteRule `json:"rules"`
}

// MeshHTTPRouteRule is one rule: its matches (any of them; none matches every request)
// and its default.
type MeshHTTPRouteRule struct {
	Matches []HTTPRouteMatch `json:"matches,omitempty"`
	Default RouteDefault     `json:"default"`
}

// HTTPRouteMatch is one matches element; every part given must match.
type HTTPRouteMatch struct {
	Path        *HTTPPathMatch   `json:"path,omitempty"`
	Method      string           `json:"method,omitempty"`
	Headers     []HTTPValueMatch `json:"headers,omitempty"`
	QueryParams []HTTPValueMatch `json:"queryParams,omitempty"`
}

// HTTPPathMatch is matches[].path: type Exact, PathPrefix or RegularExpression.
type HTTPPathMatch struct {
	Type  string `json:"type"`
	Value string `json:"value"`
}

// HTTPValueMatch is a header or query parameter match: type Exact (default),
// RegularExpression, Present, Absent or Prefix (headers).
type HTTPValueMatch struct {
	Type  string `json:"type,omitempty"`
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

// HTTPRouteFilter is one filters element: its type and the field of that type.
type HTTPRouteFilter struct {
	Type                   string               `json:"type"`
	RequestHeaderModifier  *HTTPHeaderModifier  `json:"requestHeaderModifier,omitempty"`
	ResponseHeaderModifier *HTTPHeaderModifier  `json:"responseHeaderModifier,omitempty"`
	RequestRedirect        *HTTPRequestRedirect `json:"requestRedirect,omitempty"`
	URLRewrite             *HTTPURLRewrite      `json:"urlRewrite,omitempty"`
	RequestMirror          *HTTPRequestMirror   `json:"requestMirror,omitempty"`
}

// HTTPHeaderModifier sets (replacing), adds (appending) and removes headers.
type HTTPHeaderModifier struct {
	Set    []HTTPHeader `json:"set,omitempty"`
	Add    []HTTPHeader `json:"add,omitempty"`
	Remove []string     `json:"remove,omitempty"`
}

// HTTPHeader is a header's name and value.
type HTTPHeader struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// HTTPRequestRedirect answers with a redirect.
type HTTPRequestRedirect struct {
	Scheme     string          `json:"scheme,omitempty"`
	Hostname   string          `json:"hostname,omitempty"`
	Path       *HTTPPathModify `json:"path,omitempty"`
	Port       uint32          `json:"port,omitempty"`
	StatusCode uint32          `json:"statusCode,omitempty"`
}

// HTTPURLRewrite rewrites the host and path before forwarding.
type HTTPURLRewrite struct {
	Hostname              string          `json:"hostname,omitempty"`
	Path                  *HTTPPathModify `json:"path,omitempty"`
	HostToBackendHostname bool            `json:"hostToBackendHostname,omitempty"`
}

// HTTPPathModify is a path rewrite: type ReplaceFullPath or ReplacePrefixMatch.
type HTTPPathModify struct {
	Type               string `json:"type"`
	ReplaceFullPath    string `json:"replaceFullPath,omitempty"`
	ReplacePrefixMatch string `json:"replacePrefixMatch,omitempty"`
}

// HTTPRequestMirror mirrors a percentage of the requests (all when not given) to a backend.
type HTTPRequestMirror struct {
	BackendRef RouteBackendRef `json:"backendRef"`
	Percentage any             `json:"percentage,omitempty"`
}

func (*MeshService) Kind() string   { return KindMeshService }
func (*MeshTCPRoute) Kind() string  { return KindMeshTCPRoute }
func (*MeshHTTPRoute) Kind() string { return KindMeshHTTPRoute }

var (
	pathMatchTypes   = []string{"Exact", "PathPrefix", "RegularExpression"}
	valueMatchTypes  = []string{"Exact", "RegularExpression", "Present", "Absent", "Prefix"}
	queryMatchTypes  = []string{"Exact", "RegularExpression"}
	httpMethods      = []string{"CONNECT", "DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE"}
	filterTypes      = []string{"RequestHeaderModifier", "ResponseHeaderModifier", "RequestRedirect", "URLRewrite", "RequestMirror"}
	redirectCodes    = []uint32{301, 302, 303, 307, 308}
	pathModifyTypes  = []string{"ReplaceFullPath", "ReplacePrefixMatch"}
	topRefKinds      = []string{RefMesh, RefMeshSubset, KindMeshService, RefMeshServiceSubset, RefDataplane}
	backendRefKinds  = []string{KindMeshService, RefMeshServiceSubset, KindMeshExternalService}
	redirectSchemes  = []string{"http", "https"}
	maxRouteBackends = 1000
)

// topRef checks spec.targetRef (nil: Mesh, as in Kuma).
func (v *validator) topRef(r *PolicyRef) {
	if r == nil {
		return
	}
	const p = "spec.targetRef"
	if !slices.Contains(topRefKinds, r.Kind) {
		v.errorf(p+".kind", r.Kind, "must be one of %s (this agent configures the dataplanes it selects)", strings.Join(topRefKinds, ", "))
		return
	}
	if len(r.Tags) > 0 && r.Kind != RefMeshSubset && r.Kind != RefMeshServiceSubset {
		v.errorf(p+".tags", "", "only for %s and %s", RefMeshSubset, RefMeshServiceSubset)
	}
	if r.Name != "" && (r.Kind == RefMesh || r.Kind == RefMeshSubset) {
		v.errorf(p+".name", r.Name, "not for %s", r.Kind)
	}
	switch r.Kind {
	case RefMeshSubset:
		if len(r.Tags) == 0 {
			v.errorf(p+".tags", "", "required for %s", r.Kind)
		}
	case KindMeshService, RefMeshServiceSubset:
		if r.Name == "" && len(r.Labels) == 0 {
			v.errorf(p+".name", "", "required for %s (or labels)", r.Kind)
		}
		if r.Kind == RefMeshServiceSubset && len(r.Tags) == 0 {
			v.errorf(p+".tags", "", "required for %s", r.Kind)
		}
	case RefDataplane:
		if r.Name != "" && len(r.Labels) > 0 {
			v.errorf(p, "", "give name or labels, not both")
		}
	}
}

// toRef checks a to[].targetRef: a MeshService (by name, or by labels) or a
// MeshExternalService (by name).
func (v *validator) toRef(p string, r PolicyRef) {
	if len(r.Tags) > 0 {
		v.errorf(p+".tags", "", "a to[].targetRef names a MeshService: a subset is a backendRef's (kind %s)", RefMeshServiceSubset)
	}
	if len(r.ProxyTypes) > 0 {
		v.errorf(p+".proxyTypes", "", "only for a top-level targetRef")
	}
	switch r.Kind {
	case KindMeshService:
		if r.Name == "" && len(r.Labels) == 0 {
			v.errorf(p+".name", "", "required (the MeshService's name, or a kuma.io/service), or labels")
		}
	case KindMeshExternalService:
		if r.Name == "" {
			v.errorf(p+".name", "", "required")
		}
	case "":
		v.errorf(p+".kind", "", "required: %s or %s", KindMeshService, KindMeshExternalService)
	default:
		v.errorf(p+".kind", r.Kind, "must be %s or %s (a gateway's Mesh is not acted on here)", KindMeshService, KindMeshExternalService)
	}
}

// backendRefs checks a rule's backendRefs.
func (v *validator) backendRefs(p string, refs []RouteBackendRef) {
	if len(refs) > maxRouteBackends {
		v.errorf(p, strconv.Itoa(len(refs)), "at most %d backendRefs", maxRouteBackends)
		return
	}
	for i := range refs {
		v.backendRef(indexPath(p, i), &refs[i])
	}
}

func (v *validator) backendRef(p string, b *RouteBackendRef) {
	if !slices.Contains(backendRefKinds, b.Kind) {
		v.errorf(p+".kind", b.Kind, "must be one of %s", strings.Join(backendRefKinds, ", "))
		return
	}
	if b.Name == "" {
		v.errorf(p+".name", "", "required")
	}
	if b.SectionName != "" {
		v.errorf(p+".sectionName", b.SectionName, "a backendRef names its MeshService's port with port")
	}
	if len(b.Labels) > 0 || len(b.ProxyTypes) > 0 {
		v.errorf(p, "", "a backendRef names its destination by name (labels and proxyTypes are a targetRef's)")
	}
	if b.Kind == RefMeshServiceSubset && len(b.Tags) == 0 {
		v.errorf(p+".tags", "", "required for %s", b.Kind)
	}
	if len(b.Tags) > 0 {
		v.tags(p+".tags", b.Tags, false, false)
	}
	v.port(p+".port", b.Port, false)
}

func (v *validator) meshTCPRoute(r *MeshTCPRoute) {
	v.topRef(r.Spec.TargetRef)
	if len(r.Spec.To) == 0 {
		v.errorf("spec.to", "", "at least one is required")
	}
	for i, to := range r.Spec.To {
		p := indexPath("spec.to", i)
		v.toRef(p+".targetRef", to.TargetRef)
		if len(to.Rules) != 1 {
			v.errorf(p+".rules", strconv.Itoa(len(to.Rules)), "exactly one rule (Kuma's MeshTCPRoute has one)")
		}
		for j, rule := range to.Rules {
			rp := indexPath(p+".rules", j) + ".default"
			if len(rule.Default.Filters) > 0 {
				v.errorf(rp+".filters", "", "a MeshTCPRoute has no filters")
			}
			v.backendRefs(rp+".backendRefs", rule.Default.BackendRefs)
		}
	}
}

func (v *validator) meshHTTPRoute(r *MeshHTTPRoute) {
	v.topRef(r.Spec.TargetRef)
	if len(r.Spec.To) == 0 {
		v.errorf("spec.to", "", "at least one is required")
	}
	for i, to := range r.Spec.To {
		p := indexPath("spec.to", i)
		v.toRef(p+".targetRef", to.TargetRef)
		if len(to.Rules) == 0 {
			v.errorf(p+".rules", "", "at least one rule is required")
		}
		for j := range to.Rules {
			rule := &to.Rules[j]
			rp := indexPath(p+".rules", j)
			for k := range rule.Matches {
				v.httpRouteMatch(indexPath(rp+".matches", k), &rule.Matches[k])
			}
			v.backendRefs(rp+".default.backendRefs", rule.Default.BackendRefs)
			prefixMatch := len(rule.Matches) > 0
			for _, m := range rule.Matches {
				prefixMatch = prefixMatch && m.Path != nil && m.Path.Type == "PathPrefix"
			}
			for k := range rule.Default.Filters {
				v.httpRouteFilter(indexPath(rp+".default.filters", k), &rule.Default.Filters[k], prefixMatch)
			}
		}
	}
}

func (v *validator) httpRouteMatch(p string, m *HTTPRouteMatch) {
	if pm := m.Path; pm != nil {
		switch pm.Type {
		case "Exact", "PathPrefix":
			if !strings.HasPrefix(pm.Value, "/") {
				v.errorf(p+".path.value", pm.Value, "must start with \"/\"")
			}
		case "RegularExpression":
			v.routeRegex(p+".path.value", pm.Value)
		default:
			v.errorf(p+".path.type", pm.Type, "must be one of %s", strings.Join(pathMatchTypes, ", "))
		}
	}
	if m.Method != "" && !slices.Contains(httpMethods, m.Method) {
		v.errorf(p+".method", m.Method, "must be one of %s", strings.Join(httpMethods, ", "))
	}
	for i, h := range m.Headers {
		v.valueMatch(indexPath(p+".headers", i), h, valueMatchTypes)
	}
	for i, q := range m.QueryParams {
		v.valueMatch(indexPath(p+".queryParams", i), q, queryMatchTypes)
	}
}

func (v *validator) valueMatch(p string, m HTTPValueMatch, types []string) {
	if m.Name == "" {
		v.errorf(p+".name", "", "required")
	}
	switch t := m.Type; {
	case t != "" && !slices.Contains(types, t):
		v.errorf(p+".type", t, "must be one of %s", strings.Join(types, ", "))
	case t == "RegularExpression":
		v.routeRegex(p+".value", m.Value)
	}
}

// routeRegex checks a regular expression Envoy will compile (RE2, within its program size).
func (v *validator) routeRegex(p, re string) { v.regex(p, re) }

func (v *validator) httpRouteFilter(p string, f *HTTPRouteFilter, prefixMatch bool) {
	given := map[string]bool{
		"RequestHeaderModifier":  f.RequestHeaderModifier != nil,
		"ResponseHeaderModifier": f.ResponseHeaderModifier != nil,
		"RequestRedirect":        f.RequestRedirect != nil,
		"URLRewrite":             f.URLRewrite != nil,
		"RequestMirror":          f.RequestMirror != nil,
	}
	if !slices.Contains(filterTypes, f.Type) {
		v.errorf(p+".type", f.Type, "must be one of %s", strings.Join(filterTypes, ", "))
		return
	}
	field := strings.ToLower(f.Type[:1]) + f.Type[1:]
	if f.Type == "URLRewrite" {
		field = "urlRewrite"
	}
	if !given[f.Type] {
		v.errorf(p+"."+field, "", "required for type %s", f.Type)
		return
	}
	for t, ok := range given {
		if ok && t != f.Type {
			v.errorf(p, t, "only the field of type %s may be given", f.Type)
		}
	}
	switch f.Type {
	case "RequestHeaderModifier":
		v.headerModifier(p+".requestHeaderModifier", f.RequestHeaderModifier)
	case "ResponseHeaderModifier":
		v.headerModifier(p+".responseHeaderModifier", f.ResponseHeaderModifier)
	case "RequestRedirect":
		r := f.RequestRedirect
		if r.Scheme != "" && !slices.Contains(redirectSchemes, r.Scheme) {
			v.errorf(p+".requestRedirect.scheme", r.Scheme, "must be http or https")
		}
		if r.StatusCode != 0 && !slices.Contains(redirectCodes, r.StatusCode) {
			v.errorf(p+".requestRedirect.statusCode", fmt.Sprint(r.StatusCode), "must be 301, 302, 303, 307 or 308")
		}
		v.port(p+".requestRedirect.port", r.Port, false)
		v.pathModify(p+".requestRedirect.path", r.Path, prefixMatch)
	case "URLRewrite":
		v.pathModify(p+".urlRewrite.path", f.URLRewrite.Path, prefixMatch)
	case "RequestMirror":
		v.backendRef(p+".requestMirror.backendRef", &f.RequestMirror.BackendRef)
		if _, err := MirrorPercent(f.RequestMirror.Percentage); err != nil {
			v.errorf(p+".requestMirror.percentage", fmt.Sprint(f.RequestMirror.Percentage), "%v", err)
		}
	}
}

// MirrorPercent reads a requestMirror percentage (Kuma writes a number or a numeric text);
// 100 when not given.
func MirrorPercent(x any) (float64, error) {
	var s string
	switch t := x.(type) {
	case nil:
		return 100, nil
	case string:
		s = t
	case fmt.Stringer:
		s = t.String()
	default:
		s = fmt.Sprint(t)
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f < 0 || f > 100 {
		return 0, fmt.Errorf("a percentage between 0 and 100")
	}
	return f, nil
}

func (v *validator) headerModifier(p string, h *HTTPHeaderModifier) {
	if len(h.Set)+len(h.Add)+len(h.Remove) == 0 {
		v.errorf(p, "", "give set, add or remove")
	}
	for _, l := range []struct {
		f  string
		hs []HTTPHeader
	}{{"set", h.Set}, {"add", h.Add}} {
		for i, hd := range l.hs {
			if msg := headerNameProblem(hd.Name, false); msg != "" {
				v.errorf(indexPath(p+"."+l.f, i)+".name", hd.Name, "%s", msg)
			}
			if strings.ContainsAny(hd.Value, "\r\n\x00") {
				v.errorf(indexPath(p+"."+l.f, i)+".value", hd.Value, "a header value cannot hold CR, LF or NUL")
			}
		}
	}
	for i, name := range h.Remove {
		if msg := headerNameProblem(name, false); msg != "" {
			v.errorf(indexPath(p+".remove", i), name, "%s", msg)
		}
	}
}

func (v *validator) pathModify(p string, m *HTTPPathModify, prefixMatch bool) {
	if m == nil {
		return
	}
	switch m.Type {
	case "ReplaceFullPath":
		if !strings.HasPrefix(m.ReplaceFullPath, "/") {
			v.errorf(p+".replaceFullPath", m.ReplaceFullPath, "must start with \"/\"")
		}
	case "ReplacePrefixMatch":
		if !strings.HasPrefix(m.ReplacePrefixMatch, "/") {
			v.errorf(p+".replacePrefixMatch", m.ReplacePrefixMatch, "must start with \"/\"")
		}
		if !prefixMatch {
			v.errorf(p+".type", m.Type, "needs every match of the rule to be a PathPrefix path match (as in Kuma)")
		}
	default:
		v.errorf(p+".type", m.Type, "must be one of %s", strings.Join(pathModifyTypes, ", "))
	}
}
