package xds

import (
	"fmt"

	"math"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// generateValid generates and validates; a refused set would keep Envoy on its old config.
func generateValid(t *testing.T, self *mesh.Dataplane, res []mesh.Resource, opts Options) *Resources {
	t.Helper()
	s, err := mesh.NewSnapshot(self, res)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Generate(s, defaultTable(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("generated resources do not validate:\n%v", err)
	}
	return r
}

// Weights are uint32 each; their sums (two destinations with the same tags, or '*' and the
// service itself) wrapped around: 2^31 + 2^31 became a weight of 0, which Envoy refuses, and
// the whole update with it.
func TestRouteWeightsBeyondUint32(t *testing.T) {
	const half = 1 << 31
	for _, tc := range []struct {
		name string
		conf []mesh.WeightedDestination
		want []string
	}{
		{"same-tags", []mesh.WeightedDestination{to(half, tags("service", "backend", "version", "2")), to(half, tags("service", "backend", "version", "2")), to(half, tags("service", "backend", "version", "3"))},
			[]string{"backend{version=2}:2863311528", "backend{version=3}:1431655764"}},
		{"wildcard-and-service", []mesh.WeightedDestination{to(half, tags("service", "*")), to(half, tags("service", "backend"))},
			[]string{"backend:4294967294"}},
		{"each-max", []mesh.WeightedDestination{to(math.MaxUint32, tags("service", "backend", "version", "2")), to(math.MaxUint32, tags("service", "backend", "version", "3"))},
			[]string{"backend{version=2}:2147483646", "backend{version=3}:2147483646"}},
		{"tiny-beside-huge", []mesh.WeightedDestination{to(math.MaxUint32, tags("service", "backend", "version", "2")), to(1, tags("service", "backend", "version", "3")), to(5, tags("service", "db"))},
			[]string{"backend{version=2}:4294967286", "backend{version=3}:1", "db:4"}},
		{"within-limits-unchanged", []mesh.WeightedDestination{to(math.MaxUint32-1, tags("service", "backend", "version", "2")), to(1, tags("service", "backend", "version", "3"))},
			[]string{"backend{version=2}:4294967294", "backend{version=3}:1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := generateValid(t, mobile(tags("service", "mobile")), append(backends(),
				trafficRoute("big", 0, tags("service", "mobile"), tags("service", "backend"), tc.conf...)), tproxy)
			got := splitOf(t, r, "outbound:240.0.0.1:80")
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("split = %v, want %v", got, tc.want)
			}
			var sum uint64
			for _, w := range got {
				var n uint64
				for _, c := range w[strings.LastIndexByte(w, ':')+1:] {
					n = n*10 + uint64(c-'0')
				}
				sum += n
			}
			if sum > math.MaxUint32 {
				t.Errorf("weights sum to %d, above Envoy's uint32", sum)
			}
		})
	}
}

// A dataplane's own outbound on the address and port an inbound (or the transparent proxy's
// capture listener) binds: Envoy refuses a second listener on a bound address, so the set was
// refused whole (Server.Update keeps the old one). The outbound is left out and reported; the
// incremental path must agree with a full generation, and keep the same listener, after a
// TrafficRoute change of the outbound's service.
func TestSelfOutboundOnABoundAddress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    Options
		obs     []mesh.Outbound
		keep    string // the listener kept at the address, and its cluster
		cluster string
		problem string
	}{
		{"inbound", Options{}, []mesh.Outbound{{Port: 8080, Address: "10.0.0.1", Tags: tags(mesh.ServiceTag, "backend")}},
			"inbound:10.0.0.1:8080", "localhost:8080", `networking.outbound[0].port: 10.0.0.1:8080 is taken by listener "inbound:10.0.0.1:8080"`},
		{"capture", tproxy, []mesh.Outbound{{Port: 15001, Address: "0.0.0.0", Tags: tags(mesh.ServiceTag, "backend")}},
			"outbound:passthrough", "outbound:passthrough", `networking.outbound[0].port: 0.0.0.0:15001 is taken by listener "outbound:passthrough"`},
		{"vip", tproxy, []mesh.Outbound{{Port: 5432, Address: "240.0.0.2", Tags: tags(mesh.ServiceTag, "backend")}},
			"outbound:240.0.0.2:5432", "db", `networking.outbound[0].port: 240.0.0.2:5432 is taken by listener "outbound:240.0.0.2:5432"`},
		{"outbound", Options{}, []mesh.Outbound{{Port: 9000, Tags: tags(mesh.ServiceTag, "db")}, {Port: 9000, Tags: tags(mesh.ServiceTag, "backend")}},
			"outbound:127.0.0.1:9000", "db", `networking.outbound[1].port: 127.0.0.1:9000 is taken by listener "outbound:127.0.0.1:9000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			self := mobile(tags("service", "mobile"))
			self.Networking.Extra().Outbound = tc.obs
			gen := NewGenerator()
			for step, res := range [][]mesh.Resource{
				backends(),
				append(backends(), trafficRoute("split", 0, tags("service", "mobile"), tags("service", "backend"), to(50, tags("service", "backend", "version", "2")), to(50, tags("service", "backend", "version", "3")))),
			} {
				want := generateValid(t, self, res, tc.opts)
				if got := splitOf(t, want, tc.keep); len(got) != 1 || got[0] != tc.cluster {
					t.Errorf("step %d: %s routes to %v, want %s", step, tc.keep, got, tc.cluster)
				}
				if len(want.Problems) != 1 || !strings.Contains(want.Problems[0].String(), tc.problem) {
					t.Errorf("step %d: problems = %v, want one containing %q", step, want.Problems, tc.problem)
				}
				s, err := mesh.NewSnapshot(self, res)
				if err != nil {
					t.Fatal(err)
				}
				got, err := gen.Generate(s, defaultTable(), tc.opts)
				if err != nil {
					t.Fatal(err)
				}
				sameAsFull(t, step, want, got)
				if fmt.Sprint(got.Problems) != fmt.Sprint(want.Problems) {
					t.Errorf("step %d: incremental problems %v, full %v", step, got.Problems, want.Problems)
				}
			}
		})
	}
}

// Envoy refuses a pipe address whose path does not fit a sockaddr_un (107 bytes and the
// NUL): the cluster was generated, passed the proto checks and Envoy NACKed it.
func TestMESUnixSocketPathTooLong(t *testing.T) {
	dir := "/" + strings.Repeat("d", 90) + "/"
	for _, tc := range []struct {
		path    string
		problem string
	}{
		{dir + strings.Repeat("s", 107-len(dir)), ""},
		{dir + strings.Repeat("s", 108-len(dir)), `MeshExternalService "sock": spec.endpoints[0].address: the socket path is 108 bytes, unix sockets allow 107`},
	} {
		m := mesExample("sock", nil, mesh.MESEndpoint{Address: "unix://" + tc.path})
		self := mobile(tags("service", "mobile"))
		self.Networking.Extra().Outbound = []mesh.Outbound{{Port: 10002, BackendRef: &mesh.BackendRef{Kind: mesh.KindMeshExternalService, Name: "sock"}}}
		r := generateValid(t, self, append(backends(), m), Options{})
		hasCluster := false
		for _, c := range r.Clusters {
			hasCluster = hasCluster || c.Name == MESClusterPrefix+"sock"
		}
		if tc.problem == "" {
			if !hasCluster || len(r.Problems) != 0 {
				t.Errorf("%d bytes: cluster %v, problems %v; want the cluster and no problem", len(tc.path), hasCluster, r.Problems)
			}
			continue
		}
		if hasCluster || len(r.Problems) != 1 || !strings.Contains(r.Problems[0].String(), tc.problem) {
			t.Errorf("%d bytes: cluster %v, problems %v; want no cluster and a problem containing %q", len(tc.path), hasCluster, r.Problems, tc.problem)
		}
	}
}

// redirectPortInbound equal to redirectPortOutbound: two capture listeners bound to one
// address made the whole set invalid, so Envoy got nothing. One capture listener serves both
// directions (it hands each connection to the listener of its original destination): the
// inbound one is left out and reported.
func TestCapturePortsEqual(t *testing.T) {
	o := tproxy
	o.OutboundPort, o.InboundPort = 15001, 15001
	r := generateValid(t, mobile(tags("service", "mobile")), backends(), o)
	var capture []string
	for _, l := range r.Listeners {
		if l.GetUseOriginalDst().GetValue() {
			capture = append(capture, l.Name)
		}
	}
	if strings.Join(capture, " ") != outboundCaptureName {
		t.Errorf("capture listeners %v, want only %s", capture, outboundCaptureName)
	}
	for _, c := range r.Clusters {
		if c.Name == inboundCaptureName {
			t.Errorf("cluster %s generated without its listener", c.Name)
		}
	}
	want := "networking.transparentProxying.redirectPortInbound: the same port as redirectPortOutbound (value \"15001\")"
	if len(r.Problems) != 1 || !strings.Contains(r.Problems[0].String(), want) {
		t.Errorf("problems = %v, want one containing %q", r.Problems, want)
	}
}

// An inbound listening on all addresses (address 0.0.0.0 or ::) is reached by other
// dataplanes on the dataplane's (advertised) address: an endpoint 0.0.0.0:port made Envoy
// connect to its own host.
func TestUnspecifiedInboundAddressEndpoint(t *testing.T) {
	res := []mesh.Resource{
		func() *mesh.Dataplane {
			d := dataplane("backend-1", "10.0.1.1", inbound(8080, tags("service", "backend")))
			d.Networking.Inbound[0].Extra().Address = "0.0.0.0"
			return d
		}(),
		func() *mesh.Dataplane {
			d := dataplane("backend-2", "fd00::2", inbound(8080, tags("service", "backend")))
			d.Networking.Inbound[0].Extra().Address = "::"
			return d
		}(),
		func() *mesh.Dataplane {
			d := dataplane("backend-3", "10.0.1.3", inbound(8080, tags("service", "backend")))
			d.Networking.Inbound[0].Extra().Address = "0.0.0.0"
			d.Networking.Extra().AdvertisedAddress = "192.0.2.3"
			return d
		}(),
	}
	r := generateValid(t, mobile(tags("service", "mobile")), res, tproxy)
	var got []string
	for _, e := range r.Endpoints {
		if e.ClusterName != "backend" {
			continue
		}
		for _, lb := range e.Endpoints[0].LbEndpoints {
			got = append(got, lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress())
		}
	}
	if strings.Join(got, " ") != "10.0.1.1 fd00::2 192.0.2.3" {
		t.Errorf("backend endpoints %v, want [10.0.1.1 fd00::2 192.0.2.3]", got)
	}
}

// A dataplane on an IPv6 address is on a host with IPv6, and its inbound connections,
// redirected by the transparent proxy, arrive on IPv6: capture listeners on 0.0.0.0 refused
// them (Options.IPv6 unset). They listen on [::] (with IPv4) for it; an IPv4 dataplane's stay
// on 0.0.0.0 unless Options.IPv6 says the host has IPv6.
func TestCaptureOnIPv6ForAnIPv6Dataplane(t *testing.T) {
	for _, tc := range []struct {
		addr, inbound, want string
	}{
		{"fd00::5", "", "::"},
		{"10.0.0.1", "fd00::6", "::"},
		{"10.0.0.1", "", "0.0.0.0"},
		{"10.0.0.1", "::ffff:10.0.0.2", "0.0.0.0"},
	} {
		self := dataplane("me", tc.addr, inbound(8080, tags("service", "me")))
		self.Networking.Inbound[0].Extra().Address = tc.inbound
		r := generateValid(t, self, backends(), tproxy)
		for _, l := range r.Listeners {
			if l.Name != outboundCaptureName && l.Name != inboundCaptureName {
				continue
			}
			sa := l.GetAddress().GetSocketAddress()
			if sa.GetAddress() != tc.want || sa.GetIpv4Compat() != (tc.want == "::") {
				t.Errorf("dataplane %s inbound %q: %s listens on %s (ipv4_compat %v), want %s", tc.addr, tc.inbound, l.Name, sa.GetAddress(), sa.GetIpv4Compat(), tc.want)
			}
		}
	}
}
