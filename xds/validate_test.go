package xds

import (
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/kumadp/kuma-dp/mesh"
	"google.golang.org/protobuf/types/known/anypb"
)

func validBase(t *testing.T) *Resources {
	t.Helper()
	sc := scenarios()[0]
	s, tab := sc.build(t)
	r, err := Generate(s, tab, sc.opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("base does not validate: %v", err)
	}
	return r
}

func TestValidateCatches(t *testing.T) {
	cases := []struct {
		name   string
		break_ func(r *Resources)
		want   string
	}{
		{"tcp_proxy names a missing cluster", func(r *Resources) {
			r.Listeners = append(r.Listeners, tcpListener("outbound:240.9.9.9:80", socketAddress("240.9.9.9", 80), false, tcpProxy("x", "nowhere", nil)))
		}, `names cluster "nowhere", which does not exist`},
		{"weighted cluster missing", func(r *Resources) {
			r.Listeners = append(r.Listeners, tcpListener("outbound:240.9.9.9:80", socketAddress("240.9.9.9", 80), false,
				tcpProxy("x", "", []weighted{{"backend", 1}, {"ghost", 2}})))
		}, `names cluster "ghost"`},
		{"invalid typed_config inside an Any", func(r *Resources) {
			// tcp_proxy requires a non-empty stat_prefix: only a deep check sees it.
			r.Listeners = append(r.Listeners, tcpListener("outbound:240.9.9.9:80", socketAddress("240.9.9.9", 80), false, tcpProxy("", "backend", nil)))
		}, "StatPrefix"},
		{"weight 0 inside weighted clusters", func(r *Resources) {
			r.Listeners = append(r.Listeners, tcpListener("outbound:240.9.9.9:80", socketAddress("240.9.9.9", 80), false,
				tcpProxy("x", "", []weighted{{"backend", 0}})))
		}, "Weight"},
		{"invalid TLS context in a transport socket", func(r *Resources) {
			c := staticCluster("tls", cluster.Cluster_STATIC, []*core.Address{socketAddress("1.1.1.1", 443)})
			utc := &tlsv3.UpstreamTlsContext{Sni: strings.Repeat("a", 300)}
			a, _ := anypb.New(utc)
			c.TransportSocket = &core.TransportSocket{Name: tlsTransportSocket, ConfigType: &core.TransportSocket_TypedConfig{TypedConfig: a}}
			r.Clusters = append(r.Clusters, c)
		}, "Sni"},
		{"unknown typed_config", func(r *Resources) {
			l := tcpListener("outbound:240.9.9.9:80", socketAddress("240.9.9.9", 80), false, tcpProxy("x", "backend", nil))
			l.FilterChains[0].Filters[0].ConfigType = &listener.Filter_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Type"}}
			r.Listeners = append(r.Listeners, l)
		}, "no.such.Type"},
		{"EDS cluster without assignment", func(r *Resources) {
			r.Clusters = append(r.Clusters, edsCluster("lonely", mesh.LoadBalancer{}))
		}, `cluster "lonely": EDS cluster without a cluster load assignment`},
		{"assignment without cluster", func(r *Resources) {
			r.Endpoints = append(r.Endpoints, &endpoint.ClusterLoadAssignment{ClusterName: "orphan"})
		}, `"orphan": no EDS cluster of that name`},
		{"duplicate listener", func(r *Resources) {
			r.Listeners = append(r.Listeners, r.Listeners[0])
		}, "defined twice"},
		{"two bound listeners on one address", func(r *Resources) {
			r.Listeners = append(r.Listeners, tcpListener("a", socketAddress("127.0.0.1", 9), true, tcpProxy("x", "backend", nil)),
				tcpListener("b", socketAddress("127.0.0.1", 9), true, tcpProxy("x", "backend", nil)))
		}, "binds 127.0.0.1:9"},
		{"top-level proto rule", func(r *Resources) {
			r.Clusters = append(r.Clusters, &cluster.Cluster{Name: ""})
		}, "Name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := validBase(t)
			c.break_(r)
			err := r.Validate()
			if err == nil {
				t.Fatal("Validate accepted broken resources")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not mention %q", err, c.want)
			}
		})
	}
}

func TestGenerateIsDeterministic(t *testing.T) {
	for _, sc := range scenarios() {
		s, tab := sc.build(t)
		a, _ := Generate(s, tab, sc.opts)
		b, _ := Generate(s, tab, sc.opts)
		if string(goldenJSON(t, a)) != string(goldenJSON(t, b)) {
			t.Errorf("%s: two runs differ", sc.name)
		}
	}
}

func TestGenerateNoDataplane(t *testing.T) {
	if _, err := Generate(&mesh.Snapshot{}, nil, Options{}); err == nil {
		t.Fatal("want an error without a dataplane")
	}
}

func TestCaptureListenersIPv6(t *testing.T) {
	sc := scenarios()[0]
	s, tab := sc.build(t)
	for _, v6 := range []bool{false, true} {
		o := sc.opts
		o.IPv6 = v6
		r, err := Generate(s, tab, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		for _, l := range r.Listeners {
			if l.Name != outboundCaptureName && l.Name != inboundCaptureName {
				continue
			}
			sa := l.GetAddress().GetSocketAddress()
			want := "0.0.0.0"
			if v6 {
				want = "::"
			}
			if sa.GetAddress() != want || sa.GetIpv4Compat() != v6 || !l.GetUseOriginalDst().GetValue() {
				t.Errorf("IPv6=%v: %s listens on %s (ipv4_compat %v, use_original_dst %v)", v6, l.Name, sa.GetAddress(), sa.GetIpv4Compat(), l.GetUseOriginalDst().GetValue())
			}
		}
	}
}
