package xds

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerfilter "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/kumadp/kuma-dp/mesh"
)

// Router replicas: a dataplane whose inbound a Router's `dataplanes` selector matches is one
// of that router's gateway replicas. Its gateway inbound gets, instead of the plain inbound
// listener, an HTTP listener ("router:<ip>:<port>") with one virtual host per name served by
// the routes admitted on the router - the route's final DNS name, or *.<domain> for a
// Subdomain wildcard route - holding each route's path prefix, longest first, sent to the
// EDS cluster of the route's service (its endpoints are the service's inbounds in the mesh).
// A route not admitted, or scheduled onto another router, is not in it.

const (
	httpConnectionManagerFilter = "envoy.filters.network.http_connection_manager"
	httpRouterFilter            = "envoy.filters.http.router"
)

// gateway is one inbound of Self that serves a router.
type gateway struct {
	router *mesh.Router
	index  int // in Self.Networking.Inbound
}

// gateways are Self's router inbounds, by inbound index; a Kuma gateway dataplane
// (networking.gateway, no inbounds) whose gateway tags a router selects serves it on the
// router's listener, under mesh.GatewayInbound. An inbound (or gateway) matched by several
// routers serves the first by name (a problem names the others).
func (g *generator) gateways() map[int]*mesh.Router {
	out := map[int]*mesh.Router{}
	for i, t := range gatewayTags(g.s.Self) {
		for _, rt := range g.s.Routers { // sorted by name
			if len(rt.Dataplanes) == 0 || !rt.Dataplanes.Matches(t) {
				continue
			}
			if first, taken := out[i]; taken {
				what := fmt.Sprintf("inbound %d", i)
				if i == mesh.GatewayInbound {
					what = "the gateway"
				}
				g.problem(mesh.KindRouter, rt.Name, "dataplanes", fmt.Sprintf("%s of dataplane %q already serves router %q; not served here", what, g.s.Self.Name, first.Name))
				continue
			}
			out[i] = rt
		}
	}
	return out
}

// gatewayTags are the tags a router's selector is matched against, by inbound index: each
// inbound's, and a Kuma gateway's under mesh.GatewayInbound.
func gatewayTags(dp *mesh.Dataplane) map[int]mesh.Tags {
	out := make(map[int]mesh.Tags, len(dp.Networking.Inbound)+1)
	for i, in := range dp.Networking.Inbound {
		out[i] = normalizeTags(in.Tags)
	}
	if t := dp.Networking.GatewayTags(); len(t) > 0 {
		out[mesh.GatewayInbound] = normalizeTags(t)
	}
	return out
}

// isRouterReplica reports whether s.Self serves a router (its config is then generated in
// full on every change: see genState.incremental).
func isRouterReplica(s *mesh.Snapshot) bool {
	if s == nil || s.Self == nil {
		return false
	}
	for _, t := range gatewayTags(s.Self) {
		for _, rt := range s.Routers {
			if len(rt.Dataplanes) > 0 && rt.Dataplanes.Matches(t) {
				return true
			}
		}
	}
	return false
}

// routedPath is one admitted route on a virtual host.
type routedPath struct {
	prefix, name, cluster string
}

// routerListeners adds the HTTP listener of each gateway inbound of Self.
func (g *generator) routerListeners(gws map[int]*mesh.Router) {
	dp := g.s.Self
	idx := make([]int, 0, len(gws))
	for i := range gws {
		idx = append(idx, i)
	}
	slices.Sort(idx)
	for _, i := range idx {
		rt := gws[i]
		var in mesh.Inbound
		if i == mesh.GatewayInbound { // a Kuma gateway: on the router's listener
			in.Port = rt.ListenerOf().Port
		} else {
			in = dp.Networking.Inbound[i]
		}
		addr := in.Address()
		if addr == "" {
			addr = dp.Networking.Address
		}
		ip, err := netip.ParseAddr(addr)
		if err != nil {
			field := fmt.Sprintf("networking.inbound[%d].address", i)
			if i == mesh.GatewayInbound {
				field = "networking.address"
			}
			g.problem(mesh.KindDataplane, dp.Name, field, fmt.Sprintf("not an IP address (value %q)", addr))
			continue
		}
		hosts := g.virtualHosts(rt)
		name := listenerName("router", ip, in.Port)
		bind := !g.o.TransparentProxy
		if bind {
			g.bind(ip, in.Port, name)
		}
		var sig strings.Builder
		fmt.Fprint(&sig, bind, "|", rt.Name)
		for _, d := range sortedKeys(hosts) {
			sig.WriteString("|" + d)
			for _, p := range hosts[d] {
				sig.WriteString(" " + p.prefix + ">" + p.cluster + "=" + p.name)
			}
		}
		g.addListener(name, sig.String(), func() *listener.Listener {
			l := tcpListener(name, socketAddress(ip.String(), in.Port), bind, g.httpRouter(rt.Name, hosts))
			l.TrafficDirection = core.TrafficDirection_INBOUND
			return l
		})
	}
}

// virtualHosts are the paths of the routes admitted on rt, by served name, longest prefix
// first. Two routes on one name and prefix (the scheduler admits one) keep the first by
// namespace/name; the other is a problem.
func (g *generator) virtualHosts(rt *mesh.Router) map[string][]routedPath {
	hosts := map[string][]routedPath{}
	for _, r := range g.s.Routes { // sorted by name
		if r.Status == nil || r.Status.Router != rt.Name || !r.Admitted() || r.To.Service == "" {
			continue
		}
		domain := strings.ToLower(strings.TrimSuffix(r.ServedName(), "."))
		if domain == "" {
			continue
		}
		prefix := r.Path
		if prefix == "" {
			prefix = "/"
		}
		id := r.Namespace + "/" + r.Name
		if i := slices.IndexFunc(hosts[domain], func(p routedPath) bool { return p.prefix == prefix }); i >= 0 {
			g.problem(mesh.KindRoute, r.Name, "path", fmt.Sprintf("%s%s is served by route %s already", domain, prefix, hosts[domain][i].name))
			continue
		}
		cl := g.serviceCluster(mesh.Tags{{Key: mesh.ServiceTag, Value: r.To.Service}}, mesh.LoadBalancer{})
		hosts[domain] = append(hosts[domain], routedPath{prefix: prefix, name: id, cluster: cl})
	}
	for _, ps := range hosts {
		slices.SortFunc(ps, func(a, b routedPath) int {
			return cmp.Or(cmp.Compare(len(b.prefix), len(a.prefix)), cmp.Compare(a.prefix, b.prefix))
		})
	}
	return hosts
}

// httpRouter is the http_connection_manager filter of a router listener: its route table
// inline (the host's port ignored), then Envoy's router filter.
func (g *generator) httpRouter(router string, hosts map[string][]routedPath) *listener.Filter {
	rc := &routev3.RouteConfiguration{Name: "router:" + router}
	for _, d := range sortedKeys(hosts) {
		vh := &routev3.VirtualHost{Name: d, Domains: []string{d}}
		for _, p := range hosts[d] {
			vh.Routes = append(vh.Routes, &routev3.Route{
				Name:  p.name,
				Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: p.prefix}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{
					ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: p.cluster}}},
			})
		}
		rc.VirtualHosts = append(rc.VirtualHosts, vh)
	}
	return g.hcmFilter(&hcm.HttpConnectionManager{
		StatPrefix:     "router_" + router,
		CodecType:      hcm.HttpConnectionManager_AUTO,
		StripPortMode:  &hcm.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true},
		RouteSpecifier: &hcm.HttpConnectionManager_RouteConfig{RouteConfig: rc},
	})
}

// websocketUpgrade is every HTTP connection manager's upgrade list (shared: never modified).
var websocketUpgrade = []*hcm.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}}

// hcmFilter is the network filter of http_connection_manager m, Envoy's router filter
// added as its one HTTP filter.
func (g *generator) hcmFilter(m *hcm.HttpConnectionManager) *listener.Filter {
	// WebSocket upgrades pass, as they did through the tcp_proxy an outbound has without
	// HTTP rules (and as OpenShift's routers pass them): without it Envoy answers an
	// upgrade request 403 (envoy.extensions.filters.network.http_connection_manager).
	m.UpgradeConfigs = websocketUpgrade
	rf := &routerfilter.Router{}
	rfAny := mustAny(rf)
	g.packed.add(rfAny, rf)
	m.HttpFilters = []*hcm.HttpFilter{{Name: httpRouterFilter, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: rfAny}}}
	a := mustAny(m)
	g.packed.add(a, m)
	return &listener.Filter{Name: httpConnectionManagerFilter, ConfigType: &listener.Filter_TypedConfig{TypedConfig: a}}
}

// routeClusters are the clusters the inline route tables of a listener's HTTP connection
// managers name (for the cross-reference check). packed gives the messages of the Anys a
// generation packed; others are unpacked.
func routeClusters(l *listener.Listener, packed map[*anypb.Any]proto.Message) []string {
	var out []string
	for _, fc := range l.GetFilterChains() {
		for _, f := range fc.GetFilters() {
			a := f.GetTypedConfig()
			if a == nil || !strings.HasSuffix(a.GetTypeUrl(), "http_connection_manager.v3.HttpConnectionManager") {
				continue
			}
			m, ok := packed[a].(*hcm.HttpConnectionManager)
			if !ok {
				m = &hcm.HttpConnectionManager{}
				if a.UnmarshalTo(m) != nil {
					continue // the proto check reports it
				}
			}
			for _, vh := range m.GetRouteConfig().GetVirtualHosts() {
				for _, r := range vh.GetRoutes() {
					if c := r.GetRoute().GetCluster(); c != "" {
						out = append(out, c)
					}
					for _, w := range r.GetRoute().GetWeightedClusters().GetClusters() {
						out = append(out, w.GetName()) // an outbound's HTTP rules (httproute.go)
					}
					for _, m := range r.GetRoute().GetRequestMirrorPolicies() {
						out = append(out, m.GetCluster()) // a MeshHTTPRoute's RequestMirror (meshhttp.go)
					}
				}
			}
		}
	}
	return out
}
