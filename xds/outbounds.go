package xds

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// vipOutbounds: with the transparent proxy, one virtual listener per VIP:port of the table
// (IPv4 and its IPv6 twin). Without it nothing can reach a VIP, so none are generated.
func (g *generator) vipOutbounds() {
	if !g.o.TransparentProxy {
		return
	}
	for _, ob := range g.t.Outbounds() {
		g.vipOutbound(ob)
	}
}

func (g *generator) vipOutbound(ob vipalloc.Outbound) {
	var spec proxySpec
	switch {
	case ob.MeshExternalService != "":
		c, ok := g.meshExternalService(ob.MeshExternalService)
		if !ok {
			return
		}
		spec = g.mesProxy(c, ob.MeshExternalService, ob.Port)
	case ob.MeshService != "":
		var ok bool
		if spec, ok = g.meshServiceProxy(ob.Hostname, ob.MeshService, ob.Port); !ok {
			return
		}
	default:
		tags := normalizeTags(ob.Tags)
		var ok bool
		if spec, ok = g.serviceProxy(ob.Hostname, tags, ob.Port); !ok {
			return
		}
		g.track(tags.Value(mesh.ServiceTag), spec)
	}
	g.addProxyListeners(spec, false, ob.Port, ob.IPv4, ob.IPv6)
}

// addProxyListeners adds one tcp_proxy listener per address; they share one filter.
func (g *generator) addProxyListeners(spec proxySpec, bind bool, port uint32, ips ...netip.Addr) {
	var sig string
	if g.next != nil { // only a Generator's memory compares signatures
		sig = spec.sig()
		if bind {
			sig += "|bind"
		}
	}
	// Built once for the addresses' listeners, which may be built concurrently.
	filter := sync.OnceValue(func() *listener.Filter {
		if spec.http != nil {
			return g.httpProxy(spec)
		}
		if spec.kuma != nil {
			return g.kumaHTTPProxy(spec)
		}
		return g.tcpProxy(spec.stat, spec.single, spec.split, spec.hashSource)
	})
	for _, ip := range ips {
		if !ip.IsValid() {
			continue
		}
		name := listenerName("outbound", ip, port)
		g.addListener(name, sig, func() *listener.Listener {
			return tcpListener(name, socketAddress(ip.String(), port), bind, filter())
		})
	}
}

// selfOutbounds: the dataplane's explicit outbounds (universal without the transparent proxy)
// are real listeners on their address (127.0.0.1 by default) and port.
func (g *generator) selfOutbounds() {
	for i, ob := range g.s.Self.Networking.Outbound() {
		g.selfOutbound(i, ob)
	}
}

func (g *generator) selfOutbound(i int, ob mesh.Outbound) {
	dp := g.s.Self
	field := fmt.Sprintf("networking.outbound[%d]", i)
	ip, ok := selfOutboundIP(ob)
	if !ok {
		g.problem(mesh.KindDataplane, dp.Name, field+".address", fmt.Sprintf("not an IP address (value %q)", ob.Address))
		return
	}
	// Envoy refuses a second listener on a bound address: the first one keeps it. A
	// Generator never regenerates an outbound left out here (newState), so its patches
	// keep the same listener.
	ap := netip.AddrPortFrom(ip, uint16(ob.Port))
	by, taken := g.bound[ap]
	if name := listenerName("outbound", ip, ob.Port); !taken && hasKey(g.listeners, name) {
		by, taken = name, true // a VIP's (virtual) listener
	}
	if taken {
		if g.selfSkipped == nil {
			g.selfSkipped = map[int]bool{}
		}
		g.selfSkipped[i] = true
		g.problem(mesh.KindDataplane, dp.Name, field+".port", fmt.Sprintf("%s is taken by listener %q; this outbound is left out", ap, by))
		return
	}
	var spec proxySpec
	switch {
	case ob.BackendRef != nil && ob.BackendRef.Kind == mesh.KindMeshExternalService:
		c, ok := g.meshExternalService(ob.BackendRef.Name)
		if !ok {
			if g.mes[ob.BackendRef.Name] == nil {
				g.problem(mesh.KindDataplane, dp.Name, field+".backendRef.name", fmt.Sprintf("no MeshExternalService %q", ob.BackendRef.Name))
			}
			return
		}
		spec = g.mesProxy(c, ob.BackendRef.Name, ob.Port)
	case ob.BackendRef != nil && ob.BackendRef.Kind == mesh.KindMeshService:
		var ok bool
		if spec, ok = g.meshServiceProxy(ob.BackendRef.Name, ob.BackendRef.Name, ob.BackendRef.Port); !ok {
			g.problem(mesh.KindDataplane, dp.Name, field+".backendRef", fmt.Sprintf("no MeshService %q with port %d (write the port when it has several)", ob.BackendRef.Name, ob.BackendRef.Port))
			return
		}
	case ob.BackendRef != nil:
		g.problem(mesh.KindDataplane, dp.Name, field+".backendRef.kind", fmt.Sprintf("unsupported kind (value %q)", ob.BackendRef.Kind))
		return
	default:
		tags := normalizeTags(ob.Tags)
		stat := ob.Hostname
		if stat == "" {
			stat = tags.Value(mesh.ServiceTag)
		}
		var ok bool
		if spec, ok = g.serviceProxy(stat, tags, ob.Port); !ok {
			g.problem(mesh.KindDataplane, dp.Name, field+".tags", "no kuma.io/service tag")
			return
		}
		g.track(tags.Value(mesh.ServiceTag), spec)
	}
	g.bind(ip, ob.Port, listenerName("outbound", ip, ob.Port))
	g.addProxyListeners(spec, true, ob.Port, ip)
}

func selfOutboundIP(ob mesh.Outbound) (netip.Addr, bool) {
	addr := ob.Address
	if addr == "" {
		addr = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(addr)
	return ip, err == nil
}

// serviceProxy is the tcp_proxy of an outbound to the service tags: split by the best
// TrafficRoute when one applies (the L4 TrafficRoute design), else a single cluster for the
// tags; with the route's HTTP rules when it has some and the service is HTTP (httproute.go).
func (g *generator) serviceProxy(stat string, tags mesh.Tags, port uint32) (proxySpec, bool) {
	svc := tags.Value(mesh.ServiceTag)
	if svc == "" {
		return proxySpec{}, false
	}
	if spec, ok := g.kumaServiceProxy(stat, svc, port); ok {
		return spec, true // Kuma's route policies beat a TrafficRoute, as in Kuma
	}
	if r := g.routes.best(svc); r != nil {
		cluster := func(t mesh.Tags) string { return g.serviceCluster(t, r.lb) }
		kind := notHTTP
		if r.http != nil {
			kind = httpKind(g.byService[svc])
		}
		http := kind != notHTTP
		if http {
			cluster = func(t mesh.Tags) string {
				return g.serviceClusterFor(t, r.lb, g.http2Service(t.Value(mesh.ServiceTag)))
			}
		}
		spec := proxySpec{stat: stat, split: r.split(svc, cluster), hashSource: r.lb.Type == "ringHash" || r.lb.Type == "maglev"}
		if http {
			spec.http = httpRoutes(r, svc, kind == grpcOnly, cluster)
		}
		return spec, true
	}
	return proxySpec{stat: stat, single: g.serviceCluster(tags, mesh.LoadBalancer{})}, true
}

// serviceCluster ensures the EDS cluster and assignment for destination tags exist and
// returns the cluster's name: the service name when only the service tag is given, else an
// "ad-hoc" cluster named after the service and the other tags sorted by key; a load
// balancer other than round robin (a TrafficRoute's) adds its own "{...}" (lbSuffix), so
// that routes balancing one destination differently have a cluster each.
func (g *generator) serviceCluster(tags mesh.Tags, lb mesh.LoadBalancer) string {
	return g.serviceClusterFor(tags, lb, false)
}

// serviceClusterFor is serviceCluster; h2 makes the cluster's upstream connections HTTP/2
// (the HTTP rules of an outbound sending to an http2 or grpc service: httproute.go), in a
// cluster of its own named with http2Suffix.
func (g *generator) serviceClusterFor(tags mesh.Tags, lb mesh.LoadBalancer, h2 bool) string {
	name := clusterName(tags) + lbSuffix(lb)
	if h2 {
		name += http2Suffix
	}
	if _, ok := g.clusters[name]; ok {
		return name
	}
	g.addCluster(name, "", func() *cluster.Cluster {
		c := edsCluster(name, lb)
		if h2 {
			c.TypedExtensionProtocolOptions = http2Options()
		}
		return c
	})
	if g.st != nil {
		svc := tags.Value(mesh.ServiceTag)
		g.st.dest[name] = svc
		if !slices.Contains(g.st.destClusters[svc], name) {
			g.st.destClusters[svc] = append(g.st.destClusters[svc], name)
		}
	}
	var members []inboundRef
	var sig strings.Builder
	for _, in := range g.byService[tags.Value(mesh.ServiceTag)] {
		if len(tags) == 1 || tags.Matches(in.tags) {
			members = append(members, in)
			if g.next != nil { // only a Generator's memory compares signatures
				sig.WriteString(in.addr)
				sig.WriteByte(':')
				sig.WriteString(strconv.FormatUint(uint64(in.port), 10))
				sig.WriteByte(',')
			}
		}
	}
	g.addEndpoints(name, sig.String(), func() *endpoint.ClusterLoadAssignment {
		addrs := make([]*core.Address, len(members))
		for i, in := range members {
			addrs[i] = socketAddress(in.addr, in.port)
		}
		return loadAssignment(name, addrs)
	})
	return name
}

// clusterName: "backend" for {service: backend}; "backend{region=us,version=2}" for more
// tags. The service name leads so that metrics can be aggregated per service. A service
// named like one of the agent's own clusters ("localhost:8080", "10.0.0.1:8080",
// "outbound:passthrough", "meshexternalservice_payments", "kuma-dp-xds") is named "localhost:8080{}":
// with the service's name alone, its EDS cluster and the agent's would be one, and either
// a dataplane's inbound traffic or a MeshExternalService's would go to that service (or
// the service's traffic to them). Tag values cannot hold '{', so "{}" cannot be a name.
func clusterName(tags mesh.Tags) string {
	svc := tags.Value(mesh.ServiceTag)
	if len(tags) == 1 {
		if ownClusterName(svc) {
			return svc + "{}"
		}
		return svc
	}
	var b strings.Builder
	b.WriteString(svc)
	b.WriteByte('{')
	first := true
	for _, tg := range tags { // sorted by key
		if tg.Key == mesh.ServiceTag {
			continue
		}
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(tg.Key)
		b.WriteByte('=')
		b.WriteString(tg.Value)
	}
	b.WriteByte('}')
	return b.String()
}

// lbSuffix names a load balancer in a cluster's name: "" for round robin (Envoy's default,
// and Kuma's), else the type and the settings that differ from Envoy's defaults in braces:
// "{leastRequest}", "{leastRequest:5}", "{ringHash:MURMUR_HASH_2:64:4096}". Braces without
// '=' cannot come from tags (clusterName), so no service's cluster has such a name.
func lbSuffix(lb mesh.LoadBalancer) string {
	switch lb.Type {
	case "", "roundRobin":
		return ""
	case "leastRequest":
		if lb.ChoiceCount > 2 {
			return "{leastRequest:" + strconv.FormatUint(uint64(lb.ChoiceCount), 10) + "}"
		}
		return "{leastRequest}"
	case "ringHash":
		hf, lo, hi := lb.HashFunction, lb.MinRingSize, lb.MaxRingSize
		if hf == "" {
			hf = "XX_HASH"
		}
		if lo == 0 {
			lo = mesh.DefaultMinRingSize
		}
		if hi == 0 {
			hi = mesh.MaxRingSize
		}
		if hf == "XX_HASH" && lo == mesh.DefaultMinRingSize && hi == mesh.MaxRingSize {
			return "{ringHash}"
		}
		return "{ringHash:" + hf + ":" + strconv.FormatUint(lo, 10) + ":" + strconv.FormatUint(hi, 10) + "}"
	}
	return "{" + lb.Type + "}"
}

// ownClusterName reports whether name could be the name of a cluster the agent makes for
// itself: every one of them holds a ':' (inbound's local application, the transparent
// proxy's passthrough) or starts with MESClusterPrefix, or is the bootstrap's static cluster
// of the agent's xDS server (which CDS cannot replace: the service's traffic went to the
// agent's socket).
func ownClusterName(name string) bool {
	return strings.IndexByte(name, ':') >= 0 || strings.HasPrefix(name, MESClusterPrefix) ||
		strings.HasPrefix(name, MeshServiceClusterPrefix) || name == xdsServerCluster
}

// xdsServerCluster is bootstrap.XDSClusterName (bootstrap imports this package;
// TestServiceNamedLikeTheBootstrapCluster keeps them equal).
const xdsServerCluster = "kuma-dp-xds"

// hasKey: a full generation puts names in the maps before their messages are built.
func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}
