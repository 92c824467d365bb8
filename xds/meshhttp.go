package xds

import (
	"fmt"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/mesh"
)

// MeshService outbounds and the Envoy resources of Kuma's route policies (meshroutes.go).
//
// Each port of a MeshService with a VIP gets a listener on the VIP and port (and its IPv6
// twin) sending to the cluster meshservice_<name>_<port>: an EDS cluster whose endpoints are
// the selected dataplanes' serving inbounds on the port's targetPort (by number or by the
// inbound's name). A MeshTCPRoute makes that listener's tcp_proxy a weighted one over the
// backendRefs' clusters; MeshHTTPRoutes make it an http_connection_manager with a route per
// match of each merged rule (most specific first, as Kuma orders them), their filters in
// the routes, then a catch-all route to the outbound's own cluster.

// MeshServiceClusterPrefix starts the clusters of MeshService ports.
const MeshServiceClusterPrefix = "meshservice_"

// meshServiceCluster ensures the cluster of port p of ms exists (restricted to the inbounds
// with tags subset, when given; with HTTP/2 upstream connections when h2) and names it.
func (g *generator) meshServiceCluster(ms *mesh.MeshService, p *mesh.MeshServicePort, subset mesh.Tags, h2 bool) string {
	name := MeshServiceClusterPrefix + ms.Name + "_" + strconv.FormatUint(uint64(p.Port), 10)
	if len(subset) > 0 {
		name += "{" + strings.TrimSuffix(strings.TrimPrefix(subset.String(), "{"), "}") + "}"
	}
	if h2 {
		name += http2Suffix
	}
	if _, ok := g.clusters[name]; ok {
		return name
	}
	g.addCluster(name, "", func() *cluster.Cluster {
		c := edsCluster(name, mesh.LoadBalancer{})
		if h2 {
			c.TypedExtensionProtocolOptions = http2Options()
		}
		return c
	})
	var addrs []*core.Address
	var sig strings.Builder
	for _, c := range g.msCandidates(ms) {
		if !ms.SendsTo(p, c.dp, c.in) || len(subset) > 0 && !subset.Matches(c.in.Tags) {
			continue
		}
		addr := inboundAddress(c.dp, *c.in)
		addrs = append(addrs, socketAddress(addr, c.in.Port))
		fmt.Fprintf(&sig, "%s:%d,", addr, c.in.Port)
	}
	g.addEndpoints(name, sig.String(), func() *endpoint.ClusterLoadAssignment { return loadAssignment(name, addrs) })
	return name
}

// dpInbound is one inbound of a dataplane.
type dpInbound struct {
	dp *mesh.Dataplane
	in *mesh.Inbound
}

// msIndex finds the inbounds a MeshService's selector may pick without a pass over the
// mesh per MeshService: by the first tag of dataplaneTags selectors (only the keys some
// selector starts with are indexed), by dataplane name for dataplaneRef.
type msIndex struct {
	byTag  map[mesh.Tag][]dpInbound
	byName map[string]*mesh.Dataplane
}

// msCandidates are the inbounds that MeshService ms may select (a superset: SendsTo decides).
func (g *generator) msCandidates(ms *mesh.MeshService) []dpInbound {
	if g.msIx == nil {
		g.msIx = newMSIndex(g.s)
	}
	sel := ms.Spec.Selector
	switch {
	case len(sel.DataplaneTags) > 0:
		return g.msIx.byTag[sel.DataplaneTags[0]]
	case sel.DataplaneRef != nil:
		dp := g.msIx.byName[sel.DataplaneRef.Name]
		if dp == nil {
			return nil
		}
		return inboundsOf(dp)
	}
	var out []dpInbound
	for _, dp := range g.s.Dataplanes {
		out = append(out, inboundsOf(dp)...)
	}
	return out
}

func inboundsOf(dp *mesh.Dataplane) []dpInbound {
	out := make([]dpInbound, len(dp.Networking.Inbound))
	for i := range dp.Networking.Inbound {
		out[i] = dpInbound{dp, &dp.Networking.Inbound[i]}
	}
	return out
}

func newMSIndex(s *mesh.Snapshot) *msIndex {
	ix := &msIndex{byTag: map[mesh.Tag][]dpInbound{}, byName: make(map[string]*mesh.Dataplane, len(s.Dataplanes))}
	keys := map[string]bool{}
	for _, ms := range s.MeshServices {
		if t := ms.Spec.Selector.DataplaneTags; len(t) > 0 {
			keys[t[0].Key] = true
		}
	}
	for _, dp := range s.Dataplanes {
		ix.byName[dp.Name] = dp
		for i := range dp.Networking.Inbound {
			in := &dp.Networking.Inbound[i]
			for _, tg := range in.Tags {
				if keys[tg.Key] {
					ix.byTag[tg] = append(ix.byTag[tg], dpInbound{dp, in})
				}
			}
		}
	}
	return ix
}

// meshServicePort finds MeshService name's port numbered port; nil (problem reported by
// the caller) when there is none.
func (g *generator) meshServicePort(name string, port uint32) (*mesh.MeshService, *mesh.MeshServicePort) {
	ms := g.kuma.services[name]
	if ms == nil {
		return nil, nil
	}
	if port == 0 {
		return ms, ms.FindPort("")
	}
	return ms, ms.FindPort(strconv.FormatUint(uint64(port), 10))
}

// meshServiceProxy is the proxySpec of an outbound to port port of MeshService name: its
// cluster, or what the route policies naming it make of it.
func (g *generator) meshServiceProxy(stat, name string, port uint32) (proxySpec, bool) {
	ms, p := g.meshServicePort(name, port)
	if p == nil {
		return proxySpec{}, false
	}
	h2 := p.Protocol() == "http2" || p.Protocol() == "grpc"
	isHTTP := mesh.IsHTTPProtocol(p.Protocol())
	own := func() string { return g.meshServiceCluster(ms, p, nil, false) }
	o, ok := g.kuma.forOutbound(outboundKey{kind: "ms", name: name, port: p.Port}, isHTTP)
	if !ok {
		return proxySpec{stat: stat, single: own()}, true
	}
	return g.kumaProxy(stat, o, p.Port, p.Protocol() == "grpc", func() string {
		if o.tcp {
			return own()
		}
		return g.meshServiceCluster(ms, p, nil, h2)
	}), true
}

// mesProxy is the proxySpec of an outbound to MeshExternalService name, whose cluster is c:
// that cluster, or what the route policies naming it make of it.
func (g *generator) mesProxy(c, name string, port uint32) proxySpec {
	m := g.mes[name]
	if m == nil || len(g.kuma.policies) == 0 {
		return proxySpec{stat: c, single: c}
	}
	p := m.Spec.Match.Protocol
	o, ok := g.kuma.forOutbound(outboundKey{kind: "mes", name: name}, mesh.IsHTTPProtocol(p))
	if !ok {
		return proxySpec{stat: c, single: c}
	}
	return g.kumaProxy(c, o, port, p == "grpc", func() string { return c })
}

// kumaServiceProxy is the proxySpec the route policies make of an outbound to kuma.io/service
// svc (the older API), false when none names it.
func (g *generator) kumaServiceProxy(stat, svc string, port uint32) (proxySpec, bool) {
	if len(g.kuma.policies) == 0 {
		return proxySpec{}, false
	}
	kind := httpKind(g.byService[svc])
	o, ok := g.kuma.forOutbound(outboundKey{kind: "svc", name: svc}, kind != notHTTP)
	if !ok {
		return proxySpec{}, false
	}
	h2 := kind >= http2Only && !o.tcp
	return g.kumaProxy(stat, o, port, kind == grpcOnly, func() string {
		return g.serviceClusterFor(mesh.Tags{{Key: mesh.ServiceTag, Value: svc}}, mesh.LoadBalancer{}, h2)
	}), true
}

// kumaProxy builds the proxySpec of merged route policies o on an outbound whose own
// cluster own names (the destination when a rule gives no backendRefs).
func (g *generator) kumaProxy(stat string, o kumaOutbound, port uint32, grpc bool, own func() string) proxySpec {
	if o.tcp {
		split := g.backendSplit(mesh.KindMeshTCPRoute, o.tcpFrom, "spec.to.rules[0].default.backendRefs", o.backends, port, false, own)
		return proxySpec{stat: stat, split: split}
	}
	h := &kumaHTTPSpec{grpc: grpc}
	var sig strings.Builder
	catchAll := false
	for i, rule := range o.http {
		field := "spec.to.rules (matches " + rule.key + ")"
		h2 := strings.HasSuffix(own(), http2Suffix)
		split := g.backendSplit(mesh.KindMeshHTTPRoute, rule.policy, field+".default.backendRefs", rule.def.BackendRefs, port, h2, own)
		matches := rule.matches
		if len(matches) == 0 {
			matches = []mesh.HTTPRouteMatch{{}}
		}
		for j, m := range matches {
			rt := g.kumaRoute(fmt.Sprintf("%s/rules[%d]/matches[%d]", rule.policy, i, j), m, rule, split, port, h2)
			h.routes = append(h.routes, rt)
			catchAll = catchAll || isCatchAll(m)
		}
		sig.WriteString(rule.policy + "|" + rule.key + "|")
		writeSplit(&sig, '>', split)
		fmt.Fprintf(&sig, "|%+v", rule.def.Filters)
	}
	if !catchAll {
		h.routes = append(h.routes, &routev3.Route{
			Name:   stat,
			Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
			Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: own()}}},
		})
		sig.WriteString("|default>" + own())
	}
	if grpc {
		for _, rt := range h.routes {
			if a := rt.GetRoute(); a != nil {
				a.Timeout = durationpb.New(0)
			}
		}
	}
	h.sig = sig.String()
	return proxySpec{stat: stat, kuma: h}
}

// kumaHTTPSpec is an outbound's routes from MeshHTTPRoutes (proxySpec.kuma).
type kumaHTTPSpec struct {
	routes []*routev3.Route
	grpc   bool
	sig    string
}

// kumaHTTPProxy is the http_connection_manager of an outbound with MeshHTTPRoute rules.
func (g *generator) kumaHTTPProxy(spec proxySpec) *listener.Filter {
	vh := &routev3.VirtualHost{Name: spec.stat, Domains: []string{"*"}, Routes: spec.kuma.routes}
	rc := &routev3.RouteConfiguration{Name: "outbound:" + spec.stat, VirtualHosts: []*routev3.VirtualHost{vh}}
	return g.hcmFilter(&hcm.HttpConnectionManager{
		StatPrefix:     spec.stat,
		CodecType:      hcm.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: rc},
	})
}

// isCatchAll reports whether a match takes every request.
func isCatchAll(m mesh.HTTPRouteMatch) bool {
	return m.Method == "" && len(m.Headers) == 0 && len(m.QueryParams) == 0 &&
		(m.Path == nil || m.Path.Type == "PathPrefix" && m.Path.Value == "/")
}

// backendSplit is the weighted clusters of backendRefs (own's cluster when there are none);
// a backendRef naming nothing known is left out and reported.
func (g *generator) backendSplit(kind, policy, field string, refs []mesh.RouteBackendRef, port uint32, h2 bool, own func() string) []weighted {
	if len(refs) == 0 {
		return []weighted{{cluster: own(), weight: 1}}
	}
	var names []string
	var sums []uint64
	for i := range refs {
		b := &refs[i]
		w := b.WeightOr1()
		if w == 0 {
			continue
		}
		c, err := g.backendCluster(b, port, h2)
		if err != nil {
			g.problem(kind, policy, indexPath(field, i)+"."+err.field, err.msg)
			continue
		}
		if at := indexOf(names, c); at >= 0 {
			sums[at] += uint64(w)
			continue
		}
		names, sums = append(names, c), append(sums, uint64(w))
	}
	if len(names) == 0 {
		g.problem(kind, policy, field, "no backendRef with a weight above 0 names a destination here: the outbound keeps its own")
		return []weighted{{cluster: own(), weight: 1}}
	}
	sums = fitWeights(sums)
	out := make([]weighted, len(names))
	for i := range names {
		out[i] = weighted{cluster: names[i], weight: uint32(sums[i])}
	}
	return out
}

func indexOf(ss []string, s string) int {
	for i, x := range ss {
		if x == s {
			return i
		}
	}
	return -1
}

func indexPath(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

// backendCluster is the cluster of one backendRef: a MeshService's port (a subset of its
// inbounds for MeshServiceSubset), a kuma.io/service (the older form: no MeshService has the
// name), or a MeshExternalService.
func (g *generator) backendCluster(b *mesh.RouteBackendRef, port uint32, h2 bool) (string, *backendError) {
	if b.Kind == mesh.KindMeshExternalService {
		c, ok := g.meshExternalService(b.Name)
		if !ok {
			return "", &backendError{"name", fmt.Sprintf("no usable MeshExternalService %q", b.Name)}
		}
		return c, nil
	}
	for _, ms := range g.kuma.named[b.Name] {
		if !refNames(&b.PolicyRef, ms) {
			continue
		}
		var p *mesh.MeshServicePort
		switch {
		case b.Port != 0:
			p = ms.FindPort(strconv.FormatUint(uint64(b.Port), 10))
		case len(ms.Spec.Ports) == 1:
			p = &ms.Spec.Ports[0]
		default:
			p = ms.FindPort(strconv.FormatUint(uint64(port), 10))
		}
		if p == nil {
			return "", &backendError{"port", fmt.Sprintf("MeshService %q has no port %d: give one of its ports", ms.Name, max(b.Port, port))}
		}
		ph2 := h2 && (p.Protocol() == "http2" || p.Protocol() == "grpc")
		return g.meshServiceCluster(ms, p, b.Tags, ph2), nil
	}
	if _, ok := g.byService[b.Name]; !ok && b.Namespace == "" {
		return "", &backendError{"name", fmt.Sprintf("no MeshService and no dataplane's kuma.io/service is %q", b.Name)}
	}
	tags := b.Tags.Without(mesh.ServiceTag).With(mesh.ServiceTag, b.Name)
	return g.serviceClusterFor(tags, mesh.LoadBalancer{}, h2 && g.http2Service(b.Name)), nil
}

// kumaRoute is the Envoy route of one match of a merged MeshHTTPRoute rule: to split, or
// the redirect a RequestRedirect filter makes; the other filters on it.
func (g *generator) kumaRoute(name string, m mesh.HTTPRouteMatch, rule mergedRule, split []weighted, port uint32, h2 bool) *routev3.Route {
	rt := &routev3.Route{Name: name, Match: kumaRouteMatch(m)}
	var action *routev3.RouteAction
	for _, f := range rule.def.Filters {
		if f.Type == "RequestRedirect" {
			rt.Action = &routev3.Route_Redirect{Redirect: redirectAction(f.RequestRedirect)}
		}
	}
	if rt.Action == nil {
		action = weightedAction(split, nil)
		if len(split) == 1 {
			action = &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: split[0].cluster}}
		}
		rt.Action = &routev3.Route_Route{Route: action}
	}
	for i, f := range rule.def.Filters {
		g.kumaFilter(rt, action, f, func(field string, b *mesh.RouteBackendRef) (string, bool) {
			c, err := g.backendCluster(b, port, h2)
			if err != nil {
				g.problem(mesh.KindMeshHTTPRoute, rule.policy, fmt.Sprintf("spec.to.rules (matches %s).default.filters[%d].%s.%s", rule.key, i, field, err.field), err.msg)
				return "", false
			}
			return c, true
		})
	}
	return rt
}

// kumaRouteMatch is Envoy's match of a MeshHTTPRoute match.
func kumaRouteMatch(m mesh.HTTPRouteMatch) *routev3.RouteMatch {
	rm := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if p := m.Path; p != nil {
		switch p.Type {
		case "Exact":
			rm.PathSpecifier = &routev3.RouteMatch_Path{Path: p.Value}
		case "PathPrefix":
			if v := p.Value; v != "/" && !strings.HasSuffix(v, "/") {
				// Kuma's (Gateway API's) prefix is by path segment: /v2 takes /v2 and /v2/x, not /v2x.
				rm.PathSpecifier = &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: v}
			} else {
				rm.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: v}
			}
		case "RegularExpression":
			rm.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: p.Value}}
		}
	}
	if m.Method != "" {
		rm.Headers = append(rm.Headers, headerMatcher(":method", mesh.StringMatcher{Exact: &m.Method}))
	}
	for _, h := range m.Headers {
		rm.Headers = append(rm.Headers, kumaHeaderMatcher(h))
	}
	for _, q := range m.QueryParams {
		sm := &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: q.Value}}
		if q.Type == "RegularExpression" {
			sm.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: q.Value}}
		}
		rm.QueryParameters = append(rm.QueryParameters, &routev3.QueryParameterMatcher{Name: q.Name,
			QueryParameterMatchSpecifier: &routev3.QueryParameterMatcher_StringMatch{StringMatch: sm}})
	}
	return rm
}

// kumaFilter applies one filter to route rt (action: its route action, nil for a redirect,
// which forwards nothing); cluster gives a mirror's backendRef's cluster.
func (g *generator) kumaFilter(rt *routev3.Route, action *routev3.RouteAction, f mesh.HTTPRouteFilter,
	cluster func(field string, b *mesh.RouteBackendRef) (string, bool)) {
	switch f.Type {
	case "RequestHeaderModifier":
		add, rm := headerModifier(f.RequestHeaderModifier)
		rt.RequestHeadersToAdd, rt.RequestHeadersToRemove = append(rt.RequestHeadersToAdd, add...), append(rt.RequestHeadersToRemove, rm...)
	case "ResponseHeaderModifier":
		add, rm := headerModifier(f.ResponseHeaderModifier)
		rt.ResponseHeadersToAdd, rt.ResponseHeadersToRemove = append(rt.ResponseHeadersToAdd, add...), append(rt.ResponseHeadersToRemove, rm...)
	case "URLRewrite":
		if action == nil {
			return
		}
		u := f.URLRewrite
		if u.Hostname != "" {
			action.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: u.Hostname}
		} else if u.HostToBackendHostname {
			action.HostRewriteSpecifier = &routev3.RouteAction_AutoHostRewrite{AutoHostRewrite: wrapperspb.Bool(true)}
		}
		if p := u.Path; p != nil {
			switch p.Type {
			case "ReplaceFullPath":
				action.RegexRewrite = &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: "^.*$"}, Substitution: p.ReplaceFullPath}
			case "ReplacePrefixMatch":
				action.PrefixRewrite = p.ReplacePrefixMatch
			}
		}
	case "RequestMirror":
		if action == nil {
			return
		}
		c, ok := cluster("requestMirror.backendRef", &f.RequestMirror.BackendRef)
		if !ok {
			return
		}
		pct, _ := mesh.MirrorPercent(f.RequestMirror.Percentage)
		action.RequestMirrorPolicies = append(action.RequestMirrorPolicies, &routev3.RouteAction_RequestMirrorPolicy{Cluster: c,
			RuntimeFraction: &core.RuntimeFractionalPercent{DefaultValue: &typev3.FractionalPercent{
				Numerator: uint32(pct * 10000), Denominator: typev3.FractionalPercent_MILLION}}})
	}
}

// kumaHeaderMatcher is a MeshHTTPRoute header match.
func kumaHeaderMatcher(h mesh.HTTPValueMatch) *routev3.HeaderMatcher {
	name := strings.ToLower(h.Name)
	switch h.Type {
	case "Present":
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: true}}
	case "Absent":
		return &routev3.HeaderMatcher{Name: name, HeaderMatchSpecifier: &routev3.HeaderMatcher_PresentMatch{PresentMatch: false}}
	case "Prefix":
		return headerMatcher(name, mesh.StringMatcher{Prefix: &h.Value})
	case "RegularExpression":
		return headerMatcher(name, mesh.StringMatcher{Regex: &h.Value})
	}
	return headerMatcher(name, mesh.StringMatcher{Exact: &h.Value})
}

// headerModifier: set replaces a header, add appends to it, remove removes it.
func headerModifier(h *mesh.HTTPHeaderModifier) ([]*core.HeaderValueOption, []string) {
	var out []*core.HeaderValueOption
	for _, s := range h.Set {
		out = append(out, &core.HeaderValueOption{Header: &core.HeaderValue{Key: s.Name, Value: s.Value},
			AppendAction: core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD})
	}
	for _, a := range h.Add {
		out = append(out, &core.HeaderValueOption{Header: &core.HeaderValue{Key: a.Name, Value: a.Value},
			AppendAction: core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD})
	}
	return out, h.Remove
}

// redirectCodes maps Kuma's statusCode to Envoy's (302 when not given, as in Kuma).
var redirectCodes = map[uint32]routev3.RedirectAction_RedirectResponseCode{
	301: routev3.RedirectAction_MOVED_PERMANENTLY, 302: routev3.RedirectAction_FOUND, 303: routev3.RedirectAction_SEE_OTHER,
	307: routev3.RedirectAction_TEMPORARY_REDIRECT, 308: routev3.RedirectAction_PERMANENT_REDIRECT, 0: routev3.RedirectAction_FOUND,
}

func redirectAction(r *mesh.HTTPRequestRedirect) *routev3.RedirectAction {
	a := &routev3.RedirectAction{HostRedirect: r.Hostname, PortRedirect: r.Port, ResponseCode: redirectCodes[r.StatusCode]}
	if r.Scheme != "" {
		a.SchemeRewriteSpecifier = &routev3.RedirectAction_SchemeRedirect{SchemeRedirect: r.Scheme}
	}
	if p := r.Path; p != nil {
		switch p.Type {
		case "ReplaceFullPath":
			a.PathRewriteSpecifier = &routev3.RedirectAction_PathRedirect{PathRedirect: p.ReplaceFullPath}
		case "ReplacePrefixMatch":
			a.PathRewriteSpecifier = &routev3.RedirectAction_PrefixRewrite{PrefixRewrite: p.ReplacePrefixMatch}
		}
	}
	return a
}
