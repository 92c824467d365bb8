package xds

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	origdst "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/mesh"
)

// Well-known extension names, as Envoy registers them.
const (
	tcpProxyFilter       = "envoy.filters.network.tcp_proxy"
	originalDstFilter    = "envoy.filters.listener.original_dst"
	tlsTransportSocket   = "envoy.transport_sockets.tls"
	outboundCaptureName  = "outbound:passthrough"
	inboundCaptureName   = "inbound:passthrough"
	connectTimeout       = 5 * time.Second
	dnsRefreshRate       = 30 * time.Second
	adsConfigSourceValue = "ads"
)

// weighted is one destination cluster of a tcp_proxy.
type weighted struct {
	cluster string
	weight  uint32
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(fmt.Sprintf("xds: packing %T: %v", m, err)) // only on a broken proto registry
	}
	return a
}

// socketAddress builds the four small messages of an address in one allocation (there are
// tens of thousands of them in a large mesh).
func socketAddress(ip string, port uint32) *core.Address {
	b := &struct {
		addr core.Address
		wrap core.Address_SocketAddress
		sock core.SocketAddress
		port core.SocketAddress_PortValue
	}{}
	b.port.PortValue = port
	b.sock.Address, b.sock.PortSpecifier = ip, &b.port
	b.wrap.SocketAddress = &b.sock
	b.addr.Address = &b.wrap
	return &b.addr
}

func pipeAddress(path string) *core.Address {
	return &core.Address{Address: &core.Address_Pipe{Pipe: &core.Pipe{Path: path}}}
}

// listenerName is "<direction>:<ip>:<port>" with IPv6 addresses in brackets.
func listenerName(direction string, ip netip.Addr, port uint32) string {
	b := make([]byte, 0, len(direction)+48)
	b = append(b, direction...)
	b = append(b, ':')
	return string(netip.AddrPortFrom(ip, uint16(port)).AppendTo(b))
}

// tcpProxy is a tcp_proxy network filter to one cluster, or to weighted clusters when the
// destinations come from a TrafficRoute.
func tcpProxy(statPrefix string, single string, split []weighted) *listener.Filter {
	f, _ := tcpProxyPacked(statPrefix, single, split, false)
	return f
}

// tcpProxyPacked is tcpProxy, also returning the message packed in the filter's typed_config.
func tcpProxyPacked(statPrefix string, single string, split []weighted, hashSource bool) (*listener.Filter, *tcpproxy.TcpProxy) {
	tp := &tcpproxy.TcpProxy{StatPrefix: statPrefix}
	if hashSource {
		tp.HashPolicy = sourceIPHash
	}
	if split == nil {
		tp.ClusterSpecifier = &tcpproxy.TcpProxy_Cluster{Cluster: single}
	} else {
		wc := &tcpproxy.TcpProxy_WeightedCluster{}
		for _, w := range split {
			wc.Clusters = append(wc.Clusters, &tcpproxy.TcpProxy_WeightedCluster_ClusterWeight{Name: w.cluster, Weight: w.weight})
		}
		tp.ClusterSpecifier = &tcpproxy.TcpProxy_WeightedClusters{WeightedClusters: wc}
	}
	return &listener.Filter{Name: tcpProxyFilter, ConfigType: &listener.Filter_TypedConfig{TypedConfig: mustAny(tp)}}, tp
}

// packedSet remembers, for the Anys a generation packed, the message packed in each, so
// validation checks that message instead of unpacking a copy of it (an Any is the
// deterministic encoding of its message, and resources are never mutated once built).
// Safe for concurrent adds.
type packedSet struct {
	mu sync.Mutex
	m  map[*anypb.Any]proto.Message
}

func (p *packedSet) add(a *anypb.Any, m proto.Message) {
	p.mu.Lock()
	if p.m == nil {
		p.m = map[*anypb.Any]proto.Message{}
	}
	p.m[a] = m
	p.mu.Unlock()
}

// tcpProxy is the package-level tcpProxy, remembering what it packed.
func (g *generator) tcpProxy(statPrefix string, single string, split []weighted, hashSource bool) *listener.Filter {
	f, tp := tcpProxyPacked(statPrefix, single, split, hashSource)
	g.packed.add(f.GetTypedConfig(), tp)
	return f
}

// tcpListener is a listener with one filter chain holding one filter. bind=false makes it
// virtual: only a capture listener with use_original_dst hands it connections.
func tcpListener(name string, addr *core.Address, bind bool, f *listener.Filter) *listener.Listener {
	// One allocation for the listener, its filter chain and the two one-element lists.
	b := &struct {
		l       listener.Listener
		fc      listener.FilterChain
		chains  [1]*listener.FilterChain
		filters [1]*listener.Filter
	}{}
	b.filters[0] = f
	b.fc.Filters = b.filters[:]
	b.chains[0] = &b.fc
	l := &b.l
	l.Name, l.Address, l.BindToPort, l.FilterChains = name, addr, sharedBindFalse, b.chains[:]
	l.TrafficDirection = core.TrafficDirection_OUTBOUND
	if len(name) >= 7 && name[:7] == "inbound" {
		l.TrafficDirection = core.TrafficDirection_INBOUND
	}
	if bind {
		l.BindToPort = sharedBindTrue
	}
	return l
}

// captureListener is a transparent-proxy listener: bound on all addresses at port, it takes
// the original destination of redirected connections and hands them to the listener bound
// (virtually) to that destination, or to the passthrough cluster when none is.
func captureListener(name, bindIP string, port uint32, passthrough string, dir core.TrafficDirection) *listener.Listener {
	addr := socketAddress(bindIP, port)
	if bindIP == "::" {
		addr.GetSocketAddress().Ipv4Compat = true
	}
	return &listener.Listener{
		Name:           name,
		Address:        addr,
		UseOriginalDst: wrapperspb.Bool(true),
		ListenerFilters: []*listener.ListenerFilter{{
			Name:       originalDstFilter,
			ConfigType: &listener.ListenerFilter_TypedConfig{TypedConfig: mustAny(&origdst.OriginalDst{})},
		}},
		FilterChains:     []*listener.FilterChain{{Filters: []*listener.Filter{tcpProxy(name, passthrough, nil)}}},
		TrafficDirection: dir,
	}
}

// Sub-messages every cluster or listener carries alike are shared: messages are never
// modified once built, and 10,000 outbounds mean 10,000 fewer copies of each.
var (
	sharedEDSConfig = &cluster.Cluster_EdsClusterConfig{EdsConfig: &core.ConfigSource{
		ResourceApiVersion:    core.ApiVersion_V3,
		ConfigSourceSpecifier: &core.ConfigSource_Ads{Ads: &core.AggregatedConfigSource{}},
	}}
	sharedConnectTimeout = durationpb.New(connectTimeout)
	sharedEDSType        = &cluster.Cluster_Type{Type: cluster.Cluster_EDS}
	sharedBindTrue       = wrapperspb.Bool(true)
	sharedBindFalse      = wrapperspb.Bool(false)
	// sourceIPHash is the hash key of a tcp_proxy in front of ringHash or maglev clusters.
	sourceIPHash = []*typev3.HashPolicy{{PolicySpecifier: &typev3.HashPolicy_SourceIp_{SourceIp: &typev3.HashPolicy_SourceIp{}}}}
)

// edsCluster is the EDS cluster name with load balancer lb (a TrafficRoute's; the zero
// value is round robin, Envoy's default).
func edsCluster(name string, lb mesh.LoadBalancer) *cluster.Cluster {
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: sharedEDSType,
		ConnectTimeout:       sharedConnectTimeout,
		EdsClusterConfig:     sharedEDSConfig,
	}
	switch lb.Type {
	case "leastRequest":
		c.LbPolicy = cluster.Cluster_LEAST_REQUEST
		if lb.ChoiceCount > 2 {
			c.LbConfig = &cluster.Cluster_LeastRequestLbConfig_{LeastRequestLbConfig: &cluster.Cluster_LeastRequestLbConfig{
				ChoiceCount: wrapperspb.UInt32(lb.ChoiceCount)}}
		}
	case "random":
		c.LbPolicy = cluster.Cluster_RANDOM
	case "maglev":
		c.LbPolicy = cluster.Cluster_MAGLEV
	case "ringHash":
		c.LbPolicy = cluster.Cluster_RING_HASH
		rh := &cluster.Cluster_RingHashLbConfig{}
		if lb.HashFunction == "MURMUR_HASH_2" {
			rh.HashFunction = cluster.Cluster_RingHashLbConfig_MURMUR_HASH_2
		}
		// Envoy's defaults are left out, as lbSuffix leaves them out of the name: a cluster
		// is a function of its name (two routes naming one differently would otherwise get
		// whichever was built first).
		if n := lb.MinRingSize; n != 0 && n != mesh.DefaultMinRingSize {
			rh.MinimumRingSize = wrapperspb.UInt64(n)
		}
		if n := lb.MaxRingSize; n != 0 && n != mesh.MaxRingSize {
			rh.MaximumRingSize = wrapperspb.UInt64(n)
		}
		c.LbConfig = &cluster.Cluster_RingHashLbConfig_{RingHashLbConfig: rh}
	}
	return c
}

func originalDstCluster(name string) *cluster.Cluster {
	return &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: cluster.Cluster_ORIGINAL_DST},
		LbPolicy:             cluster.Cluster_CLUSTER_PROVIDED,
		ConnectTimeout:       durationpb.New(connectTimeout),
	}
}

// staticCluster is a cluster with its endpoints inline: kind is STATIC, STRICT_DNS or
// LOGICAL_DNS.
func staticCluster(name string, kind cluster.Cluster_DiscoveryType, addrs []*core.Address) *cluster.Cluster {
	c := &cluster.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &cluster.Cluster_Type{Type: kind},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LoadAssignment:       loadAssignment(name, addrs),
	}
	if kind == cluster.Cluster_STRICT_DNS || kind == cluster.Cluster_LOGICAL_DNS {
		c.DnsRefreshRate = durationpb.New(dnsRefreshRate)
		c.DnsLookupFamily = cluster.Cluster_V4_PREFERRED
	}
	return c
}

func loadAssignment(name string, addrs []*core.Address) *endpoint.ClusterLoadAssignment {
	lbs := make([]*endpoint.LbEndpoint, 0, len(addrs))
	type lbAlloc struct {
		lb   endpoint.LbEndpoint
		host endpoint.LbEndpoint_Endpoint
		ep   endpoint.Endpoint
	}
	blocks := make([]lbAlloc, len(addrs))
	for i, a := range addrs {
		b := &blocks[i]
		b.ep.Address = a
		b.host.Endpoint = &b.ep
		b.lb.HostIdentifier = &b.host
		lbs = append(lbs, &b.lb)
	}
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	if len(lbs) > 0 {
		cla.Endpoints = []*endpoint.LocalityLbEndpoints{{LbEndpoints: lbs}}
	}
	return cla
}
