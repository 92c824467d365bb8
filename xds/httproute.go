package xds

import (
	"encoding/json"
	"strconv"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/mesh"
)

// A TrafficRoute's conf.http (Kuma's HTTP rules): an outbound to an HTTP service (every
// serving inbound of it tagged kuma.io/protocol http, http2 or grpc) whose best route has
// HTTP rules gets, instead of the tcp_proxy, an http_connection_manager with the route table
// inline: one virtual host for any name ("*") holding a route per rule, in the rules' order
// (Envoy takes the first match, as Kuma), then a catch-all "/" route for the route's own
// split. The clusters are the route's (its loadBalancer applies to all of them); a ringHash
// or maglev balancer hashes on the client's address, as the tcp_proxy does. Every other
// outbound keeps its tcp_proxy unchanged.

// httpRule is one rule of conf.http, compiled.
type httpRule struct {
	rule *mesh.HTTPRule
	conf []dest
	// key is the rule's match and modify as JSON: what an outbound listener's signature
	// needs of them.
	key string
}

// compileHTTP compiles a route's HTTP rules (validated by package mesh: matchers, rewrites
// and headers are used as written).
func compileHTTP(rules []mesh.HTTPRule) ([]httpRule, *routeError) {
	out := make([]httpRule, len(rules))
	for i := range rules {
		r := &rules[i]
		p := "http[" + strconv.Itoa(i) + "]"
		var conf []dest
		var err *routeError
		if r.Split != nil {
			conf, err = compileDests(p+".split", r.Split)
		} else {
			conf, err = compileDests(p+".destination", []mesh.WeightedDestination{{Weight: 1, Destination: r.Destination}})
			if err != nil {
				err.field = p + ".destination" + strings.TrimPrefix(err.field, p+".destination[0].destination")
			}
		}
		if err != nil {
			return nil, err
		}
		key, jerr := json.Marshal(struct {
			Match  mesh.HTTPMatch
			Modify *mesh.HTTPModify
		}{r.Match, r.Modify})
		if jerr != nil {
			return nil, &routeError{p, jerr.Error()}
		}
		out[i] = httpRule{rule: r, conf: conf, key: string(key)}
	}
	return out, nil
}

// httpSpec is what an outbound's HTTP routes are built from (proxySpec.http).
type httpSpec struct {
	route  string // the TrafficRoute's name: its routes are named after it
	rules  []httpRule
	splits [][]weighted // each rule's clusters
	// grpc: the outbound's service is a gRPC one (httpKind): its routes have no request
	// timeout (Envoy's default, 15 s, cut every longer stream; Kuma's Timeout policy has
	// none for gRPC).
	grpc bool
}

func (h *httpSpec) sig(b *strings.Builder) {
	b.WriteString("|http:")
	if h.grpc {
		b.WriteString("grpc:")
	}
	b.WriteString(h.route)
	for i, r := range h.rules {
		b.WriteString("|")
		b.WriteString(r.key)
		writeSplit(b, '>', h.splits[i])
	}
}

// What a service's serving inbounds make it for its outbounds' HTTP rules, each kind
// implying the ones before it but notHTTP.
const (
	notHTTP   = iota // none, or one not tagged http, http2 or grpc
	anyHTTP          // every one http, http2 or grpc
	http2Only        // every one http2 or grpc: its requests go out as HTTP/2
	grpcOnly         // every one grpc
)

// httpKind is notHTTP, anyHTTP, http2Only or grpcOnly for a service of these serving
// inbounds.
func httpKind(ins []inboundRef) int {
	if len(ins) == 0 {
		return notHTTP
	}
	h2, grpc := true, true
	for _, in := range ins {
		p := in.tags.Value(mesh.ProtocolTag)
		if !mesh.IsHTTPProtocol(p) {
			return notHTTP
		}
		h2 = h2 && p != "http"
		grpc = grpc && p == "grpc"
	}
	switch {
	case grpc:
		return grpcOnly
	case h2:
		return http2Only
	}
	return anyHTTP
}

// httpRoutes is the httpSpec of route r for an outbound to svc; cluster ensures a
// destination's cluster and names it.
func httpRoutes(r *route, svc string, grpc bool, cluster func(mesh.Tags) string) *httpSpec {
	h := &httpSpec{route: r.tr.Name, rules: r.http, splits: make([][]weighted, len(r.http)), grpc: grpc}
	for i, hr := range r.http {
		h.splits[i] = destSplit(hr.conf, svc, cluster)
	}
	return h
}

// http2Suffix ends the name of a cluster whose upstream connections are HTTP/2 (braces
// without '=' name no tags: clusterName).
const http2Suffix = "{http2}"

// http2Service reports whether svc speaks HTTP/2 only (httpKind http2Only or grpcOnly).
// The HTTP rules' requests to it go out as HTTP/2 (Envoy's default, HTTP/1.1, would break
// gRPC).
func (g *generator) http2Service(svc string) bool {
	return httpKind(g.byService[svc]) >= http2Only
}

// http2Options are the protocol options of an HTTP/2 cluster.
func http2Options() map[string]*anypb.Any {
	o := &upstreamhttp.HttpProtocolOptions{UpstreamProtocolOptions: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_{
		ExplicitHttpConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig{
			ProtocolConfig: &upstreamhttp.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &core.Http2ProtocolOptions{}}}}}
	return map[string]*anypb.Any{httpProtocolOptionsName: mustAny(o)}
}

// httpProtocolOptionsName is the key of Envoy's HTTP upstream options in a cluster.
const httpProtocolOptionsName = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// httpProxy is the http_connection_manager filter of an outbound with HTTP rules.
func (g *generator) httpProxy(spec proxySpec) *listener.Filter {
	h := spec.http
	var hash []*routev3.RouteAction_HashPolicy
	if spec.hashSource {
		hash = []*routev3.RouteAction_HashPolicy{{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: true}}}}
	}
	vh := &routev3.VirtualHost{Name: spec.stat, Domains: []string{"*"}, Routes: make([]*routev3.Route, 0, len(h.rules)+1)}
	for i, hr := range h.rules {
		vh.Routes = append(vh.Routes, httpRuleRoute(h.route+"/http["+strconv.Itoa(i)+"]", hr.rule, h.splits[i], hash))
	}
	vh.Routes = append(vh.Routes, &routev3.Route{
		Name:   h.route,
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: weightedAction(spec.split, hash)},
	})
	if h.grpc {
		for _, rt := range vh.Routes {
			rt.GetRoute().Timeout = durationpb.New(0)
		}
	}
	rc := &routev3.RouteConfiguration{Name: "outbound:" + spec.stat, VirtualHosts: []*routev3.VirtualHost{vh}}
	return g.hcmFilter(&hcm.HttpConnectionManager{
		StatPrefix:     spec.stat,
		CodecType:      hcm.HttpConnectionManager_AUTO,
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: rc},
	})
}

// weightedAction sends a route's requests to weighted clusters.
func weightedAction(split []weighted, hash []*routev3.RouteAction_HashPolicy) *routev3.RouteAction {
	wc := &routev3.WeightedCluster{Clusters: make([]*routev3.WeightedCluster_ClusterWeight, len(split))}
	for i, w := range split {
		wc.Clusters[i] = &routev3.WeightedCluster_ClusterWeight{Name: w.cluster, Weight: wrapperspb.UInt32(w.weight)}
	}
	return &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_WeightedClusters{WeightedClusters: wc}, HashPolicy: hash}
}

// httpRuleRoute is the Envoy route of one HTTP rule.
func httpRuleRoute(name string, r *mesh.HTTPRule, split []weighted, hash []*routev3.RouteAction_HashPolicy) *routev3.Route {
	m := &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}}
	if p := r.Match.Path; p != nil {
		switch kind, v := p.Kind(); kind {
		case "prefix":
			m.PathSpecifier = &routev3.RouteMatch_Prefix{Prefix: v}
		case "exact":
			m.PathSpecifier = &routev3.RouteMatch_Path{Path: v}
		case "regex":
			m.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v}}
		}
	}
	if r.Match.Method != nil {
		m.Headers = append(m.Headers, headerMatcher(":method", *r.Match.Method))
	}
	for _, name := range sortedKeys(r.Match.Headers) {
		m.Headers = append(m.Headers, headerMatcher(name, r.Match.Headers[name]))
	}
	action := weightedAction(split, hash)
	route := &routev3.Route{Name: name, Match: m, Action: &routev3.Route_Route{Route: action}}
	mod := r.Modify
	if mod == nil {
		return route
	}
	if p := mod.Path; p != nil {
		if p.RewritePrefix != "" {
			action.PrefixRewrite = p.RewritePrefix
		} else if p.Regex != nil {
			action.RegexRewrite = regexSubstitute(*p.Regex)
		}
	}
	if h := mod.Host; h != nil {
		if h.Value != "" {
			action.HostRewriteSpecifier = &routev3.RouteAction_HostRewriteLiteral{HostRewriteLiteral: h.Value}
		} else if h.FromPath != nil {
			action.HostRewriteSpecifier = &routev3.RouteAction_HostRewritePathRegex{HostRewritePathRegex: regexSubstitute(*h.FromPath)}
		}
	}
	if c := mod.RequestHeaders; c != nil {
		route.RequestHeadersToAdd, route.RequestHeadersToRemove = headersToAdd(c.Add), headersToRemove(c.Remove)
	}
	if c := mod.ResponseHeaders; c != nil {
		route.ResponseHeadersToAdd, route.ResponseHeadersToRemove = headersToAdd(c.Add), headersToRemove(c.Remove)
	}
	return route
}

func regexSubstitute(r mesh.RegexReplace) *matcherv3.RegexMatchAndSubstitute {
	return &matcherv3.RegexMatchAndSubstitute{Pattern: &matcherv3.RegexMatcher{Regex: r.Pattern}, Substitution: r.Substitution}
}

// headerMatcher matches header name (":method" for the method) with m.
func headerMatcher(name string, m mesh.StringMatcher) *routev3.HeaderMatcher {
	sm := &matcherv3.StringMatcher{}
	switch kind, v := m.Kind(); kind {
	case "prefix":
		sm.MatchPattern = &matcherv3.StringMatcher_Prefix{Prefix: v}
	case "regex":
		sm.MatchPattern = &matcherv3.StringMatcher_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: v}}
	default:
		sm.MatchPattern = &matcherv3.StringMatcher_Exact{Exact: v}
	}
	return &routev3.HeaderMatcher{Name: strings.ToLower(name), HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: sm}}
}

// headersToAdd: append keeps the values already there, else the header is replaced.
func headersToAdd(adds []mesh.HTTPHeaderAdd) []*core.HeaderValueOption {
	if len(adds) == 0 {
		return nil
	}
	out := make([]*core.HeaderValueOption, len(adds))
	for i, a := range adds {
		action := core.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		if a.Append {
			action = core.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD
		}
		out[i] = &core.HeaderValueOption{Header: &core.HeaderValue{Key: a.Name, Value: a.Value}, AppendAction: action}
	}
	return out
}

func headersToRemove(rs []mesh.HTTPHeaderRemove) []string {
	if len(rs) == 0 {
		return nil
	}
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.Name
	}
	return out
}
