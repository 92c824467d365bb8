package xds

import (
	"fmt"
	"net/netip"
	"strconv"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// run is a full generation: the messages are recorded as they are found, then built on
// every core (buildPending).
func (g *generator) run() {
	g.deferBuilds, g.pending = true, make([]pendingBuild, 0, 4*len(g.t.Outbounds())+8)
	gws := g.gateways()
	g.inbounds(gws)
	g.routerListeners(gws)
	g.capture()
	g.vipOutbounds()
	g.selfOutbounds()
	g.buildPending()
}

// inboundRef is one dataplane inbound: where it listens and what it is tagged with.
type inboundRef struct {
	tags mesh.Tags
	addr string
	port uint32
}

type generator struct {
	s      *mesh.Snapshot
	t      *vipalloc.Table
	o      Options
	routes *routeIndex
	// kuma: Kuma's route policies selecting this dataplane (meshroutes.go); msIx: the
	// inbounds MeshServices select, indexed when first needed (meshhttp.go).
	kuma *kumaRoutes
	msIx *msIndex
	// byService indexes every inbound of the mesh by its service tag.
	byService map[string][]inboundRef
	mes       map[string]*mesh.MeshExternalService
	mesFailed map[string]bool

	listeners map[string]*listener.Listener
	clusters  map[string]*cluster.Cluster
	endpoints map[string]*endpoint.ClusterLoadAssignment
	problems  []Problem
	// prev is the previous generation's messages by name with their input signatures;
	// next collects this generation's; touched lists the keys built or reused this time.
	prev, next map[memoKey]memoEntry
	touched    []memoKey
	// st, when set, records the dependencies for incremental generation.
	st    *genState
	trust *trustStore
	// deferBuilds: memo records the messages to build in pending (their names go in the
	// maps with a nil message) and buildPending builds them on every core. Set for full
	// generations; the incremental path builds the few it needs at once.
	deferBuilds bool
	pending     []pendingBuild
	// packed: the messages inside the Anys this generation built (for validation).
	packed packedSet
	// bound: the listener bound to each address (Envoy refuses a second one there);
	// selfSkipped: the dataplane's own outbounds left out because theirs was taken.
	bound       map[netip.AddrPort]string
	selfSkipped map[int]bool
}

// bind records that listener name binds ip:port.
func (g *generator) bind(ip netip.Addr, port uint32, name string) {
	if g.bound == nil {
		g.bound = map[netip.AddrPort]string{}
	}
	ap := netip.AddrPortFrom(ip, uint16(port))
	if _, taken := g.bound[ap]; !taken {
		g.bound[ap] = name
	}
}

func newGenerator(s *mesh.Snapshot, t *vipalloc.Table, o Options) *generator {
	g := &generator{
		s: s, t: t, o: o,
		byService: map[string][]inboundRef{},
		mes:       map[string]*mesh.MeshExternalService{},
		listeners: make(map[string]*listener.Listener, 2*len(t.Outbounds())+8),
		clusters:  make(map[string]*cluster.Cluster, len(t.Outbounds())+8),
		endpoints: make(map[string]*endpoint.ClusterLoadAssignment, len(t.Outbounds())+8),
	}
	for _, dp := range s.Dataplanes {
		for _, in := range dp.Networking.Inbound {
			if !in.Serving() {
				continue // Ignored, NotReady or not healthy: no endpoint, as in Kuma
			}
			tags := normalizeTags(in.Tags)
			svc := tags.Value(mesh.ServiceTag)
			if svc == "" {
				continue
			}
			g.byService[svc] = append(g.byService[svc], inboundRef{tags: tags, addr: inboundAddress(dp, in), port: in.Port})
		}
	}
	for _, m := range s.MeshExternalServices {
		g.mes[m.Name] = m
	}
	g.routes = newRouteIndex(s, g.problem)
	g.kuma = newKumaRoutes(s)
	return g
}

func (g *generator) problem(kind, name, field, msg string) {
	g.problems = append(g.problems, Problem{Kind: kind, Name: name, Field: field, Msg: msg})
}

func (g *generator) finish() *Resources {
	r := &Resources{Problems: g.problems, packed: g.packed.m}
	for _, svc := range sortedKeys(g.routes.conflicts) {
		r.Conflicts = append(r.Conflicts, g.routes.conflicts[svc])
	}
	r.Listeners = make([]*listener.Listener, 0, len(g.listeners))
	for _, l := range g.listeners {
		r.Listeners = append(r.Listeners, l)
	}
	r.Clusters = make([]*cluster.Cluster, 0, len(g.clusters))
	for _, c := range g.clusters {
		r.Clusters = append(r.Clusters, c)
	}
	r.Endpoints = make([]*endpoint.ClusterLoadAssignment, 0, len(g.endpoints))
	for _, e := range g.endpoints {
		r.Endpoints = append(r.Endpoints, e)
	}
	r.sort()
	return r
}

// memo returns the previous generation's message for key when it was built from the same
// inputs (sig), else build's result; either way it is recorded for the next generation.
func (g *generator) memo(kind memoKind, name, sig string, build func() proto.Message) proto.Message {
	k := memoKey{kind, name}
	if g.next == nil {
		if g.deferBuilds {
			g.pending = append(g.pending, pendingBuild{key: k, build: build})
			return nil
		}
		return build()
	}
	if g.st != nil {
		g.touched = append(g.touched, k)
	}
	e, ok := g.prev[k]
	if ok && e.sig == sig {
		g.next[k] = e
		return e.msg
	}
	if ok && g.trust != nil {
		g.trust.forget(e.msg)
	}
	if g.deferBuilds {
		g.pending = append(g.pending, pendingBuild{key: k, sig: sig, build: build})
		return nil
	}
	m := build()
	g.next[k] = memoEntry{sig: sig, msg: m}
	return m
}

func (g *generator) addListener(name, sig string, build func() *listener.Listener) {
	if _, dup := g.listeners[name]; dup {
		g.problem("Listener", name, "", "address and port used twice; the first one is kept")
		return
	}
	m, _ := g.memo(memoListener, name, sig, func() proto.Message { return build() }).(*listener.Listener)
	g.listeners[name] = m
}

func (g *generator) addCluster(name, sig string, build func() *cluster.Cluster) {
	m, _ := g.memo(memoCluster, name, sig, func() proto.Message { return build() }).(*cluster.Cluster)
	g.clusters[name] = m
}

func (g *generator) addEndpoints(name, sig string, build func() *endpoint.ClusterLoadAssignment) {
	m, _ := g.memo(memoEndpoints, name, sig, func() proto.Message { return build() }).(*endpoint.ClusterLoadAssignment)
	g.endpoints[name] = m
}

// pendingBuild is a message memo left to buildPending.
type pendingBuild struct {
	key   memoKey
	sig   string
	build func() proto.Message
}

// buildChunk is how many pending messages a worker takes at a time; the listeners of one
// outbound (which share their filter) were recorded side by side and mostly stay together.
const buildChunk = 128

// buildPending builds the pending messages on every core (the builds are pure functions of
// their inputs), then puts them in place in the order they were recorded.
func (g *generator) buildPending() {
	built := make([]proto.Message, len(g.pending))
	inChunks(len(g.pending), buildChunk, func() func(int) {
		return func(i int) { built[i] = g.pending[i].build() }
	})
	for i, p := range g.pending {
		m := built[i]
		if g.next != nil {
			g.next[p.key] = memoEntry{sig: p.sig, msg: m}
		}
		switch p.key.kind {
		case memoListener:
			g.listeners[p.key.name] = m.(*listener.Listener)
		case memoCluster:
			g.clusters[p.key.name] = m.(*cluster.Cluster)
		case memoEndpoints:
			g.endpoints[p.key.name] = m.(*endpoint.ClusterLoadAssignment)
		}
	}
	g.pending = nil
	g.deferBuilds = false
}

// inboundAddress is the address other dataplanes reach an inbound on. An inbound on all
// addresses (0.0.0.0 or ::) is reached on the dataplane's address, as one without an address.
func inboundAddress(dp *mesh.Dataplane, in mesh.Inbound) string {
	if in.Address() != "" && !unspecified(in.Address()) {
		return in.Address()
	}
	if dp.Networking.AdvertisedAddress() != "" {
		return dp.Networking.AdvertisedAddress()
	}
	return dp.Networking.Address
}

func unspecified(addr string) bool {
	ip, err := netip.ParseAddr(addr)
	return err == nil && ip.IsUnspecified()
}

// normalizeTags maps the L4 TrafficRoute design's short `service` key to kuma.io/service (when the long one is
// absent), so that `service: backend` and `kuma.io/service: backend` select the same thing.
func normalizeTags(t mesh.Tags) mesh.Tags {
	v, ok := t.Get("service")
	if !ok || t.Has(mesh.ServiceTag) {
		return t
	}
	return t.Without("service").With(mesh.ServiceTag, v)
}

// inbounds: one listener per inbound of this dataplane, forwarding to the local application
// (a router's gateway inbound gets its HTTP listener instead: router.go).
func (g *generator) inbounds(gateways map[int]*mesh.Router) {
	dp := g.s.Self
	for i, in := range dp.Networking.Inbound {
		if gateways[i] != nil {
			continue
		}
		addr := in.Address()
		if addr == "" {
			addr = dp.Networking.Address
		}
		ip, err := netip.ParseAddr(addr)
		if err != nil {
			g.problem(mesh.KindDataplane, dp.Name, fmt.Sprintf("networking.inbound[%d].address", i), fmt.Sprintf("not an IP address (value %q)", addr))
			continue
		}
		svcAddr, svcPort := in.ServiceAddress(), in.ServicePort
		if svcAddr == "" {
			svcAddr = "127.0.0.1"
		}
		if svcPort == 0 {
			svcPort = in.Port
		}
		sip, err := netip.ParseAddr(svcAddr)
		if err != nil {
			g.problem(mesh.KindDataplane, dp.Name, fmt.Sprintf("networking.inbound[%d].serviceAddress", i), fmt.Sprintf("not an IP address (value %q)", svcAddr))
			continue
		}
		local := "localhost:" + strconv.FormatUint(uint64(svcPort), 10)
		if sip != netip.MustParseAddr("127.0.0.1") {
			local = netip.AddrPortFrom(sip, uint16(svcPort)).String()
		}
		if _, ok := g.clusters[local]; !ok {
			g.addCluster(local, local, func() *cluster.Cluster {
				return staticCluster(local, cluster.Cluster_STATIC, []*core.Address{socketAddress(sip.String(), svcPort)})
			})
		}
		name := listenerName("inbound", ip, in.Port)
		stat := normalizeTags(in.Tags).Value(mesh.ServiceTag)
		if stat == "" {
			stat = name
		}
		bind := !g.o.TransparentProxy
		if bind {
			g.bind(ip, in.Port, name)
		}
		g.addListener(name, fmt.Sprint(bind, "|", stat, "|", local), func() *listener.Listener {
			return tcpListener(name, socketAddress(ip.String(), in.Port), bind, g.tcpProxy(stat, local, nil, false))
		})
	}
}

// hasIPv6Address: the dataplane or one of its inbounds has an IPv6 address, so the host has
// IPv6 and connections to it are redirected on IPv6 too.
func hasIPv6Address(dp *mesh.Dataplane) bool {
	addrs := []string{dp.Networking.Address}
	for _, in := range dp.Networking.Inbound {
		addrs = append(addrs, in.Address())
	}
	for _, a := range addrs {
		if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() && !ip.Is4In6() && !ip.IsUnspecified() {
			return true
		}
	}
	return false
}

// capture adds the transparent proxy's listeners and their passthrough clusters.
func (g *generator) capture() {
	if !g.o.TransparentProxy {
		return
	}
	bindAll := "0.0.0.0"
	if g.o.IPv6 || hasIPv6Address(g.s.Self) {
		bindAll = "::"
	}
	g.bind(netip.MustParseAddr(bindAll), g.o.OutboundPort, outboundCaptureName)
	g.addListener(outboundCaptureName, fmt.Sprint(bindAll, g.o.OutboundPort), func() *listener.Listener {
		return captureListener(outboundCaptureName, bindAll, g.o.OutboundPort, outboundCaptureName, core.TrafficDirection_OUTBOUND)
	})
	g.addCluster(outboundCaptureName, "", func() *cluster.Cluster { return originalDstCluster(outboundCaptureName) })
	if g.o.InboundPort == g.o.OutboundPort {
		// Envoy refuses a second listener there; the outbound one hands inbound connections
		// to their (virtual) inbound listeners just as well.
		g.problem(mesh.KindDataplane, g.s.Self.Name, "networking.transparentProxying.redirectPortInbound",
			fmt.Sprintf("the same port as redirectPortOutbound (value %q); one capture listener serves both", fmt.Sprint(g.o.InboundPort)))
		return
	}
	g.bind(netip.MustParseAddr(bindAll), g.o.InboundPort, inboundCaptureName)
	g.addListener(inboundCaptureName, fmt.Sprint(bindAll, g.o.InboundPort), func() *listener.Listener {
		return captureListener(inboundCaptureName, bindAll, g.o.InboundPort, inboundCaptureName, core.TrafficDirection_INBOUND)
	})
	g.addCluster(inboundCaptureName, "", func() *cluster.Cluster { return originalDstCluster(inboundCaptureName) })
}
