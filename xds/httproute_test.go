package xds

import (
	"fmt"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	upstreamhttp "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"

	"github.com/kumadp/kuma-dp/mesh"
)

// httpRouteDoc is a Kuma TrafficRoute with HTTP rules from mobile to backend; lb is its
// conf.loadBalancer.
func httpRouteDoc(lb string) string {
	return `type: TrafficRoute
name: backend-http
mesh: default
sources:
  - match: {kuma.io/service: mobile}
destinations:
  - match: {kuma.io/service: backend}
conf:
  loadBalancer: ` + lb + `
  split:
  - weight: 3
    destination: {kuma.io/service: backend, version: "2"}
  - weight: 1
    destination: {kuma.io/service: backend, version: "3"}
  http:
  - match:
      method: {exact: GET}
      path: {prefix: /api}
      headers:
        X-Canary: {exact: "true"}
        x-user: {regex: "^u[0-9]+$"}
    modify:
      path: {rewritePrefix: /v2/api}
      host: {value: api.internal}
      requestHeaders:
        add: [{name: x-routed, value: canary, append: true}, {name: x-env, value: prod}]
        remove: [{name: x-debug}]
      responseHeaders:
        add: [{name: x-served-by, value: canary}]
        remove: [{name: server}]
    split:
    - weight: 90
      destination: {kuma.io/service: backend, version: "2"}
    - weight: 10
      destination: {kuma.io/service: backend, version: "3"}
  - match:
      path: {regex: "^/users/([0-9]+)$"}
    modify:
      path: {regex: {pattern: "^/users/([0-9]+)$", substitution: "/people/\\1"}}
      host: {fromPath: {pattern: "^/users/([0-9]+)$", substitution: "u\\1.internal"}}
    destination: {kuma.io/service: db}
  - match:
      path: {exact: /health}
      method: {prefix: P}
    destination: {kuma.io/service: '*'}
`
}

// httpBackends are backends() with their inbounds tagged kuma.io/protocol (db's as tcp).
func httpBackends(protocol string) []mesh.Resource {
	out := backends()
	for _, r := range out {
		dp := r.(*mesh.Dataplane)
		in := &dp.Networking.Inbound[0]
		p := protocol
		if normalizeTags(in.Tags).Value(mesh.ServiceTag) == "db" {
			p = "tcp"
		}
		in.Tags = in.Tags.With(mesh.ProtocolTag, p)
	}
	return out
}

func decodeRoute(t *testing.T, doc string) *mesh.TrafficRoute {
	t.Helper()
	rs, err := mesh.Decode("route.yaml", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return rs[0].(*mesh.TrafficRoute)
}

// listenerHCM is the http_connection_manager of a listener, nil when its filter is another.
func listenerHCM(t *testing.T, r *Resources, name string) *hcm.HttpConnectionManager {
	t.Helper()
	for _, l := range r.Listeners {
		if l.Name != name {
			continue
		}
		f := l.FilterChains[0].Filters[0]
		if f.Name != httpConnectionManagerFilter {
			return nil
		}
		m := &hcm.HttpConnectionManager{}
		if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	t.Fatalf("no listener %q", name)
	return nil
}

// describeRoute is a route in one line: name, match, action and header changes.
func describeRoute(r *routev3.Route) string {
	var b strings.Builder
	m := r.GetMatch()
	fmt.Fprintf(&b, "%s:", r.GetName())
	switch {
	case m.GetSafeRegex() != nil:
		fmt.Fprintf(&b, " regex %s", m.GetSafeRegex().GetRegex())
	case m.GetPath() != "":
		fmt.Fprintf(&b, " path %s", m.GetPath())
	case m.GetPathSeparatedPrefix() != "":
		fmt.Fprintf(&b, " segments %s", m.GetPathSeparatedPrefix())
	default:
		fmt.Fprintf(&b, " prefix %s", m.GetPrefix())
	}
	for _, h := range m.GetHeaders() {
		sm := h.GetStringMatch()
		switch {
		case sm.GetSafeRegex() != nil:
			fmt.Fprintf(&b, " %s~%s", h.GetName(), sm.GetSafeRegex().GetRegex())
		case sm.GetPrefix() != "":
			fmt.Fprintf(&b, " %s^%s", h.GetName(), sm.GetPrefix())
		default:
			fmt.Fprintf(&b, " %s=%s", h.GetName(), sm.GetExact())
		}
	}
	for _, q := range m.GetQueryParameters() {
		fmt.Fprintf(&b, " ?%s=%s", q.GetName(), q.GetStringMatch().GetExact())
	}
	a := r.GetRoute()
	b.WriteString(" ->")
	if rd := r.GetRedirect(); rd != nil {
		fmt.Fprintf(&b, " redirect %s %s:%d %s", rd.GetSchemeRedirect(), rd.GetHostRedirect(), rd.GetPortRedirect(), rd.GetResponseCode())
	}
	if c := a.GetCluster(); c != "" {
		fmt.Fprintf(&b, " %s", c)
	}
	for _, w := range a.GetWeightedClusters().GetClusters() {
		fmt.Fprintf(&b, " %s:%d", w.GetName(), w.GetWeight().GetValue())
	}
	for _, mp := range a.GetRequestMirrorPolicies() {
		fmt.Fprintf(&b, " mirror %s %d/1000000", mp.GetCluster(), mp.GetRuntimeFraction().GetDefaultValue().GetNumerator())
	}
	if p := a.GetPrefixRewrite(); p != "" {
		fmt.Fprintf(&b, " rewrite %s", p)
	}
	if rr := a.GetRegexRewrite(); rr != nil {
		fmt.Fprintf(&b, " rewrite %s=>%s", rr.GetPattern().GetRegex(), rr.GetSubstitution())
	}
	if h := a.GetHostRewriteLiteral(); h != "" {
		fmt.Fprintf(&b, " host %s", h)
	}
	if hr := a.GetHostRewritePathRegex(); hr != nil {
		fmt.Fprintf(&b, " host %s=>%s", hr.GetPattern().GetRegex(), hr.GetSubstitution())
	}
	for _, h := range a.GetHashPolicy() {
		fmt.Fprintf(&b, " hash source_ip=%v", h.GetConnectionProperties().GetSourceIp())
	}
	headers := func(dir string, add []*core.HeaderValueOption, remove []string) {
		for _, h := range add {
			fmt.Fprintf(&b, " %s+%s=%s(%s)", dir, h.GetHeader().GetKey(), h.GetHeader().GetValue(), h.GetAppendAction())
		}
		for _, h := range remove {
			fmt.Fprintf(&b, " %s-%s", dir, h)
		}
	}
	headers("req", r.GetRequestHeadersToAdd(), r.GetRequestHeadersToRemove())
	headers("resp", r.GetResponseHeadersToAdd(), r.GetResponseHeadersToRemove())
	return b.String()
}

// An outbound to an HTTP service whose route has HTTP rules gets an http_connection_manager:
// a route per rule in order (matches, rewrites, header changes, weighted clusters), then the
// route's split for every other request; the resources pass Envoy's validation rules.
func TestHTTPRulesRouteConfig(t *testing.T) {
	for _, protocol := range []string{"http", "http2", "grpc"} {
		t.Run(protocol, func(t *testing.T) {
			tr := decodeRoute(t, httpRouteDoc("{roundRobin: {}}"))
			r := generateValid(t, mobile(tags("service", "mobile")), append(httpBackends(protocol), tr), tproxy)
			m := listenerHCM(t, r, "outbound:240.0.0.1:80")
			if m == nil {
				t.Fatal("backend's outbound has no http_connection_manager")
			}
			tcp := generateValid(t, mobile(tags("service", "mobile")), append(backends(), tr), tproxy)
			if want := tcpProxyOf(t, tcp, "outbound:240.0.0.1:80").GetStatPrefix(); m.StatPrefix != want {
				t.Errorf("stat prefix %q, want the tcp_proxy's %q", m.StatPrefix, want)
			}
			if len(m.HttpFilters) != 1 || m.HttpFilters[0].Name != httpRouterFilter {
				t.Errorf("HTTP filters %v, want the router", m.HttpFilters)
			}
			vhs := m.GetRouteConfig().GetVirtualHosts()
			if len(vhs) != 1 || strings.Join(vhs[0].Domains, ",") != "*" {
				t.Fatalf("virtual hosts %v, want one for *", vhs)
			}
			var got []string
			for _, rt := range vhs[0].Routes {
				got = append(got, describeRoute(rt))
			}
			// An http2 or grpc service's clusters speak HTTP/2 upstream (a cluster of their
			// own); db, a TCP service, keeps its plain cluster.
			h2 := ""
			if protocol != "http" {
				h2 = "{http2}"
			}
			want := []string{
				"backend-http/http[0]: prefix /api :method=GET x-canary=true x-user~^u[0-9]+$ -> backend{version=2}" + h2 + ":90 backend{version=3}" + h2 + ":10 rewrite /v2/api host api.internal" +
					" req+x-routed=canary(APPEND_IF_EXISTS_OR_ADD) req+x-env=prod(OVERWRITE_IF_EXISTS_OR_ADD) req-x-debug" +
					" resp+x-served-by=canary(OVERWRITE_IF_EXISTS_OR_ADD) resp-server",
				`backend-http/http[1]: regex ^/users/([0-9]+)$ -> db:1 rewrite ^/users/([0-9]+)$=>/people/\1 host ^/users/([0-9]+)$=>u\1.internal`,
				"backend-http/http[2]: path /health :method^P -> backend" + h2 + ":1",
				"backend-http: prefix / -> backend{version=2}" + h2 + ":3 backend{version=3}" + h2 + ":1",
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for _, c := range r.Clusters {
				opts := c.GetTypedExtensionProtocolOptions()[httpProtocolOptionsName]
				if strings.HasSuffix(c.Name, "{http2}") != (opts != nil) {
					t.Errorf("cluster %s: protocol options %v", c.Name, opts)
				}
				if opts != nil {
					var o upstreamhttp.HttpProtocolOptions
					if err := opts.UnmarshalTo(&o); err != nil || o.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
						t.Errorf("cluster %s: not HTTP/2 upstream: %v %v", c.Name, &o, err)
					}
				}
			}
			// db, a TCP service, keeps its tcp_proxy (no route of its own here).
			if got := strings.Join(splitOf(t, r, "outbound:240.0.0.2:5432"), " "); got != "db" {
				t.Errorf("db's outbound: %s", got)
			}
		})
	}
}

func tcpProxyOf(t *testing.T, r *Resources, name string) *tcpproxy.TcpProxy {
	t.Helper()
	for _, l := range r.Listeners {
		if l.Name == name {
			tp := &tcpproxy.TcpProxy{}
			if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
				t.Fatalf("%s: not a tcp_proxy: %v", name, err)
			}
			return tp
		}
	}
	t.Fatalf("no listener %q", name)
	return nil
}

// The route's loadBalancer applies to every cluster of its HTTP routes; a hashing one hashes
// the client's address on every route.
func TestHTTPRulesLoadBalancer(t *testing.T) {
	tr := decodeRoute(t, httpRouteDoc("{ringHash: {}}"))
	r := generateValid(t, mobile(tags("service", "mobile")), append(httpBackends("http"), tr), tproxy)
	m := listenerHCM(t, r, "outbound:240.0.0.1:80")
	if m == nil {
		t.Fatal("no http_connection_manager")
	}
	routes := m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()
	if len(routes) != 4 {
		t.Fatalf("%d routes", len(routes))
	}
	for _, rt := range routes {
		d := describeRoute(rt)
		if !strings.Contains(d, " hash source_ip=true") {
			t.Errorf("no source IP hash: %s", d)
		}
		for _, w := range rt.GetRoute().GetWeightedClusters().GetClusters() {
			if !strings.HasSuffix(w.GetName(), "{ringHash}") {
				t.Errorf("cluster %s is not the route's ring hash one", w.GetName())
			}
		}
	}
	clusters := map[string]bool{}
	for _, c := range r.Clusters {
		clusters[c.Name] = true
	}
	for _, c := range []string{"backend{version=2}{ringHash}", "backend{version=3}{ringHash}", "db{ringHash}", "backend{ringHash}"} {
		if !clusters[c] {
			t.Errorf("no cluster %s (have %v)", c, sortedKeys(clusters))
		}
	}
}

// The HTTP rules apply to HTTP services only, as in Kuma: an outbound to a TCP service (no
// protocol, tcp, or inbounds of mixed protocols) keeps the tcp_proxy of the route's split,
// exactly as a route without HTTP rules makes it.
func TestHTTPRulesNotForTCPServices(t *testing.T) {
	withRules := decodeRoute(t, httpRouteDoc("{roundRobin: {}}"))
	without := *withRules
	without.HTTP = nil
	mixed := httpBackends("http")
	in := &mixed[2].(*mesh.Dataplane).Networking.Inbound[0]
	in.Tags = in.Tags.With(mesh.ProtocolTag, "tcp")
	// An empty list of rules is none: an HTTP service keeps its tcp_proxy too.
	empty := *withRules
	empty.HTTP = []mesh.HTTPRule{}
	r := generateValid(t, mobile(tags("service", "mobile")), append(httpBackends("http"), &empty), tproxy)
	if listenerHCM(t, r, "outbound:240.0.0.1:80") != nil {
		t.Error("http: [] served as HTTP rules")
	}
	for name, res := range map[string][]mesh.Resource{"no protocol": backends(), "tcp": httpBackends("tcp"), "mixed": mixed} {
		t.Run(name, func(t *testing.T) {
			r := generateValid(t, mobile(tags("service", "mobile")), append(res, withRules), tproxy)
			plain := generateValid(t, mobile(tags("service", "mobile")), append(res, &without), tproxy)
			if listenerHCM(t, r, "outbound:240.0.0.1:80") != nil {
				t.Fatal("HTTP rules served for a TCP service")
			}
			if got, want := goldenJSON(t, r), goldenJSON(t, plain); string(got) != string(want) {
				t.Errorf("the route's HTTP rules changed a TCP service's resources")
			}
			if got := strings.Join(splitOf(t, r, "outbound:240.0.0.1:80"), " "); got != "backend{version=2}:3 backend{version=3}:1" {
				t.Errorf("split %s", got)
			}
		})
	}
}

// Without the transparent proxy, an outbound of the dataplane (networking.outbound) to an
// HTTP service serves the rules too, on its bound listener.
func TestHTTPRulesOnDataplaneOutbound(t *testing.T) {
	tr := decodeRoute(t, httpRouteDoc("{roundRobin: {}}"))
	self := mobile(tags("service", "mobile"))
	self.Networking.Extra().Outbound = []mesh.Outbound{{Port: 10001, Tags: tags("kuma.io/service", "backend")}}
	r := generateValid(t, self, append(httpBackends("http"), tr), Options{})
	m := listenerHCM(t, r, "outbound:127.0.0.1:10001")
	if m == nil || len(m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()) != 4 {
		t.Fatalf("outbound:127.0.0.1:10001: %v", m)
	}
	if m.StatPrefix != "backend" {
		t.Errorf("stat prefix %q", m.StatPrefix)
	}
}

// A destination service turning HTTP (its inbounds' protocol tags change, nothing else) turns
// its outbounds' HTTP rules on in an incremental generation, and TCP again turns them off,
// gRPC and back their routes' timeout off and on, each time equal to a full generation - also when the route sends none of its traffic to
// the service's own endpoints (no cluster of the outbound changes).
func TestHTTPRulesFollowTheServiceProtocol(t *testing.T) {
	tr := decodeRoute(t, `type: TrafficRoute
name: backend-to-db
mesh: default
sources: [{match: {kuma.io/service: mobile}}]
destinations: [{match: {kuma.io/service: backend}}]
conf:
  destination: {kuma.io/service: db}
  http:
  - match: {path: {prefix: /api}}
    destination: {kuma.io/service: db, kuma.io/protocol: tcp}
`)
	gen := NewGenerator()
	for step, protocol := range []string{"tcp", "http", "grpc", "http2", "grpc", "tcp"} {
		s, err := mesh.NewSnapshot(mobile(tags("service", "mobile")), append(httpBackends(protocol), tr))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := Generate(s, defaultTable(), tproxy)
		got, err := gen.Generate(s, defaultTable(), tproxy)
		if err != nil {
			t.Fatal(err)
		}
		sameAsFull(t, step, want, got)
		if isHTTP := listenerHCM(t, got, "outbound:240.0.0.1:80") != nil; isHTTP != (protocol != "tcp") {
			t.Errorf("step %d (%s): HTTP rules served: %v", step, protocol, isHTTP)
		}
	}
	if gen.partial != 5 {
		t.Errorf("%d incremental generations, want 5", gen.partial)
	}
}

// Envoy gives a route a 15 s timeout unless told otherwise: an outbound to a gRPC service
// whose route has HTTP rules cut every stream (server streaming, long polls) after 15 s,
// which its tcp_proxy never did. Its routes have no request timeout (0), Kuma's Timeout
// policy having none for gRPC; an HTTP service's keep Envoy's default (Kuma's default
// requestTimeout, 15 s).
func TestHTTPRulesGRPCStreamsHaveNoRouteTimeout(t *testing.T) {
	tr := decodeRoute(t, httpRouteDoc("{roundRobin: {}}"))
	for _, protocol := range []string{"http", "http2", "grpc"} {
		r := generateValid(t, mobile(tags("service", "mobile")), append(httpBackends(protocol), tr), tproxy)
		m := listenerHCM(t, r, "outbound:240.0.0.1:80")
		if m == nil {
			t.Fatalf("%s: no http_connection_manager", protocol)
		}
		for _, rt := range m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
			to := rt.GetRoute().GetTimeout()
			switch {
			case protocol == "grpc" && (to == nil || to.AsDuration() != 0):
				t.Errorf("grpc: route %s has timeout %v, want 0 (none)", rt.GetName(), to)
			case protocol != "grpc" && to != nil:
				t.Errorf("%s: route %s has timeout %v, want Envoy's default", protocol, rt.GetName(), to)
			}
		}
	}
}
