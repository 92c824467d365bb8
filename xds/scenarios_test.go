package xds

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/tagset"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// The test world: this dataplane is "mobile"; backend runs in three versions and regions.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func tags(kv ...string) mesh.Tags {
	return tagset.FromPairs(kv...)
}

func dataplane(name, addr string, inbounds ...mesh.Inbound) *mesh.Dataplane {
	return &mesh.Dataplane{Meta: mesh.Meta{Mesh: "default", Name: name}, Networking: mesh.Networking{Address: addr, Inbound: inbounds}}
}

func inbound(port uint32, t mesh.Tags) mesh.Inbound { return mesh.Inbound{Port: port, Tags: t} }

func backends() []mesh.Resource {
	return []mesh.Resource{
		dataplane("backend-1", "10.0.1.1", inbound(8080, tags("service", "backend", "region", "us-east-1", "version", "2"))),
		dataplane("backend-2", "10.0.1.2", inbound(8080, tags("service", "backend", "region", "eu-west-3", "version", "3"))),
		dataplane("backend-3", "10.0.1.3", inbound(8080, tags("kuma.io/service", "backend", "region", "us-east-1", "version", "3"))),
		dataplane("db-1", "10.0.2.1", inbound(5432, tags("kuma.io/service", "db"))),
	}
}

// trafficRoute is a one-rule TrafficRoute created `minutes` after t0.
func trafficRoute(name string, minutes int, src mesh.Tags, dst mesh.Tags, conf ...mesh.WeightedDestination) *mesh.TrafficRoute {
	return &mesh.TrafficRoute{
		Meta:         mesh.Meta{Mesh: "default", Name: name, MetaExtra: &mesh.MetaExtra{MetaCreationTime: t0.Add(time.Duration(minutes) * time.Minute)}},
		Sources:      []mesh.Selector{{Match: src}},
		Destinations: []mesh.Selector{{Match: dst}},
		Conf:         conf,
	}
}

func to(weight uint32, t mesh.Tags) mesh.WeightedDestination {
	return mesh.WeightedDestination{Weight: weight, Destination: t}
}

func serviceEntry(host, v4, v6 string, port uint32, t mesh.Tags) *vipalloc.Entry {
	return vipalloc.NewEntry(vipalloc.EntryData{Hostname: host, IPv4: netip.MustParseAddr(v4), IPv6: netip.MustParseAddr(v6), Ports: []uint32{port},
		Origin: vipalloc.Origin{Kind: vipalloc.OriginService, Name: t.Value(mesh.ServiceTag)}, Key: host, Tags: t, Status: vipalloc.Available})
}

func mesEntry(name, v4, v6 string, port uint32) *vipalloc.Entry {
	return vipalloc.NewEntry(vipalloc.EntryData{Hostname: name + ".svc.meshext.local", IPv4: netip.MustParseAddr(v4), IPv6: netip.MustParseAddr(v6), Ports: []uint32{port},
		Origin: vipalloc.Origin{Kind: mesh.KindHostnameGenerator, Name: "meshext"}, Key: name, Status: vipalloc.Available,
		MeshExternalService: name})
}

func defaultTable(extra ...*vipalloc.Entry) *vipalloc.Table {
	es := []*vipalloc.Entry{
		serviceEntry("backend.mesh", "240.0.0.1", "fd00:fd00::1", 80, tags(mesh.ServiceTag, "backend")),
		serviceEntry("db.mesh", "240.0.0.2", "fd00:fd00::2", 5432, tags(mesh.ServiceTag, "db")),
	}
	return vipalloc.NewTable(append(es, extra...), nil)
}

type scenario struct {
	name  string
	self  *mesh.Dataplane
	res   []mesh.Resource
	table *vipalloc.Table
	opts  Options
	// backend is the expected tcp_proxy of the backend outbound listener: clusters with
	// weights ("cluster" alone when not split). Empty: not checked.
	backend []string
	// problems are substrings expected in Resources.Problems, in order.
	problems []string
	conflict string
}

var tproxy = Options{TransparentProxy: true, CABundle: "/etc/ssl/certs/ca-certificates.crt"}

func mobile(t mesh.Tags) *mesh.Dataplane {
	return dataplane("mobile-1", "10.0.0.1", inbound(8080, t))
}

func scenarios() []scenario {
	subset1 := to(100, tags("service", "backend", "region", "us-east-1"))
	subset2 := to(100, tags("service", "backend", "region", "eu-west-3"))
	toBackend := tags("service", "backend")
	return []scenario{
		{name: "outbounds-tproxy", self: mobile(tags("service", "mobile")), res: backends(), table: defaultTable(), opts: tproxy,
			backend: []string{"backend"}},
		{name: "outbounds-no-tproxy", self: func() *mesh.Dataplane {
			d := mobile(tags("service", "mobile"))
			d.Networking.Inbound[0].ServicePort = 9090
			d.Networking.Extra().Outbound = []mesh.Outbound{
				{Port: 10001, Tags: tags("kuma.io/service", "backend")},
				{Port: 10002, BackendRef: &mesh.BackendRef{Kind: mesh.KindMeshExternalService, Name: "httpbin"}},
				{Port: 10003, BackendRef: &mesh.BackendRef{Kind: mesh.KindMeshExternalService, Name: "missing"}},
			}
			return d
		}(), res: append(backends(), mesExample("httpbin", nil, mesh.MESEndpoint{Address: "httpbin.org", Port: 80})), table: defaultTable(),
			problems: []string{`no MeshExternalService "missing"`}},
		// The L4 TrafficRoute design's universal example: 90% to {us-east-1, v2}, 10% to {v3}.
		{name: "route-design-example", self: mobile(tags("service", "mobile", "region", "us-east-1", "version", "10")), table: defaultTable(), opts: tproxy,
			res: append(backends(), trafficRoute("rule-name", 0,
				tags("service", "mobile", "region", "us-east-1", "version", "10"), toBackend,
				to(90, tags("service", "backend", "region", "us-east-1", "version", "2")),
				to(10, tags("service", "backend", "version", "3")))),
			backend: []string{"backend{region=us-east-1,version=2}:90", "backend{version=3}:10"}},
		// A: identical selectors: the most recently created rule wins.
		{name: "corner-A-identical-selectors", self: mobile(tags("service", "mobile")), table: defaultTable(), opts: tproxy,
			res: append(backends(),
				trafficRoute("rule-1", 0, tags("service", "mobile"), toBackend, subset1),
				trafficRoute("rule-2", 5, tags("service", "mobile"), toBackend, subset2)),
			backend: []string{"backend{region=eu-west-3}:100"}, conflict: `"rule-2" wins`},
		// B: a match by 2 tags beats a match by 1 tag, even an older one.
		{name: "corner-B-more-tags", self: mobile(tags("service", "mobile", "version", "2")), table: defaultTable(), opts: tproxy,
			res: append(backends(),
				trafficRoute("rule-1", 5, tags("service", "mobile"), toBackend, subset1),
				trafficRoute("rule-2", 0, tags("service", "mobile", "version", "2"), toBackend, subset2)),
			backend: []string{"backend{region=eu-west-3}:100"}},
		// C: an exact value beats '*', even an older one.
		{name: "corner-C-exact-over-wildcard", self: mobile(tags("service", "mobile")), table: defaultTable(), opts: tproxy,
			res: append(backends(),
				trafficRoute("rule-1", 0, tags("service", "mobile"), toBackend, subset1),
				trafficRoute("rule-2", 5, tags("service", "*"), toBackend, subset2)),
			backend: []string{"backend{region=us-east-1}:100"}},
		// D: matches by different tags, same count: the most recently created rule wins.
		{name: "corner-D-different-tags", self: mobile(tags("service", "mobile", "version", "2", "region", "eu-east-2")), table: defaultTable(), opts: tproxy,
			res: append(backends(),
				trafficRoute("rule-1", 5, tags("service", "mobile", "version", "2"), toBackend, subset1),
				trafficRoute("rule-2", 0, tags("service", "mobile", "region", "eu-east-2"), toBackend, subset2)),
			backend: []string{"backend{region=us-east-1}:100"}, conflict: `"rule-1" wins`},
		// E: one rule per TrafficRoute, so two "rules" are two resources; with equal rank and
		// equal creation time the name decides, so the result never depends on input order.
		{name: "corner-E-one-rule-per-route", self: mobile(tags("service", "mobile")), table: defaultTable(), opts: tproxy,
			res: append(backends(),
				trafficRoute("rule-b", 0, tags("service", "mobile"), toBackend, subset2),
				trafficRoute("rule-a", 0, tags("service", "mobile"), toBackend, subset1)),
			backend: []string{"backend{region=us-east-1}:100"}, conflict: `"rule-a" wins`},
		// F: rule-2 did not collide with rule-1 when created; this dataplane later got the
		// region tag, so both match equally: the newest wins and the conflict is reported.
		{name: "corner-F-later-collision", self: mobile(tags("service", "mobile", "version", "2", "region", "eu-east-2")), table: defaultTable(), opts: tproxy,
			res: append(backends(),
				trafficRoute("rule-1", 0, tags("service", "mobile", "version", "2"), toBackend, subset1),
				trafficRoute("rule-2", 5, tags("service", "mobile", "region", "eu-east-2"), toBackend, subset2)),
			backend: []string{"backend{region=eu-west-3}:100"}, conflict: `"rule-2" wins`},
		// Rules that cannot be expressed are left out and reported; the outbound falls back.
		{name: "route-invalid", self: mobile(tags("service", "mobile")), table: defaultTable(), opts: tproxy,
			res: append(backends(),
				trafficRoute("no-service", 5, tags("service", "mobile"), toBackend, to(100, tags("region", "us-east-1"))),
				trafficRoute("zero-weights", 6, tags("service", "mobile"), toBackend, to(0, tags("service", "backend"))),
				trafficRoute("other-source", 7, tags("service", "web"), toBackend, subset1)),
			backend:  []string{"backend"},
			problems: []string{`"no-service": conf[0].destination`, `"zero-weights": conf: no destination with a weight above 0`}},
		{name: "mes-endpoints", self: mobile(tags("service", "mobile")), opts: tproxy,
			table: defaultTable(mesEntry("by-ip", "242.0.0.1", "fd00:fd01::1", 443), mesEntry("by-name", "242.0.0.2", "fd00:fd01::2", 80),
				mesEntry("by-names", "242.0.0.3", "fd00:fd01::3", 80), mesEntry("by-unix", "242.0.0.4", "fd00:fd01::4", 6379),
				mesEntry("lambda", "242.0.0.5", "fd00:fd01::5", 80)),
			res: append(backends(),
				mesExample("by-ip", nil, mesh.MESEndpoint{Address: "1.1.1.1", Port: 12345}, mesh.MESEndpoint{Address: "2606:4700::1111"}),
				mesExample("by-name", nil, mesh.MESEndpoint{Address: "example.com"}),
				mesExample("by-names", nil, mesh.MESEndpoint{Address: "a.example.com", Port: 8080}, mesh.MESEndpoint{Address: "b.example.com", Port: 8080}),
				mesExample("by-unix", nil, mesh.MESEndpoint{Address: "unix:///run/redis.sock"}),
				func() *mesh.MeshExternalService {
					m := mesExample("lambda", nil)
					m.Spec.Extension = &mesh.MESExtension{Type: "Lambda"}
					return m
				}()),
			problems: []string{`"lambda": spec.extension.type: extensions are not supported`}},
		{name: "mes-tls", self: mobile(tags("service", "mobile")), opts: tproxy,
			table: defaultTable(mesEntry("secured", "242.0.0.1", "fd00:fd01::1", 443), mesEntry("sans", "242.0.0.2", "fd00:fd01::2", 443),
				mesEntry("skip-san", "242.0.0.3", "fd00:fd01::3", 443), mesEntry("skip-ca", "242.0.0.4", "fd00:fd01::4", 443),
				mesEntry("skip-all", "242.0.0.5", "fd00:fd01::5", 443), mesEntry("secret", "242.0.0.6", "fd00:fd01::6", 443),
				mesEntry("bad-version", "242.0.0.7", "fd00:fd01::7", 443)),
			res: append(backends(),
				mesExample("secured", &mesh.MESTLS{}, mesh.MESEndpoint{Address: "api.example.com", Port: 443}),
				mesExample("sans", &mesh.MESTLS{Version: &mesh.MESTLSVersion{Min: "TLS12", Max: "TLS13"}, AllowRenegotiation: true,
					Verification: &mesh.MESVerification{Mode: "Secured",
						SubjectAltNames: []mesh.SANMatch{{Type: "Exact", Value: "example.com"}, {Type: "Prefix", Value: "spiffe://example.local/ns/local"}},
						CACert:          &mesh.DataSource{Inline: []byte("-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n")},
						ClientCert:      &mesh.DataSource{InlineString: "-----BEGIN CERTIFICATE-----\nCLIENT\n-----END CERTIFICATE-----\n"},
						ClientKey:       &mesh.DataSource{InlineString: "-----BEGIN PRIVATE KEY-----\nKEY\n-----END PRIVATE KEY-----\n"}}},
					mesh.MESEndpoint{Address: "example.com", Port: 443}, mesh.MESEndpoint{Address: "1.2.3.4", Port: 443}),
				mesExample("skip-san", &mesh.MESTLS{Verification: &mesh.MESVerification{Mode: "SkipSAN"}}, mesh.MESEndpoint{Address: "api.example.com", Port: 443}),
				mesExample("skip-ca", &mesh.MESTLS{Verification: &mesh.MESVerification{Mode: "SkipCA"}}, mesh.MESEndpoint{Address: "api.example.com", Port: 443}),
				mesExample("skip-all", &mesh.MESTLS{Verification: &mesh.MESVerification{Mode: "SkipAll"}}, mesh.MESEndpoint{Address: "api.example.com", Port: 443}),
				mesExample("secret", &mesh.MESTLS{Verification: &mesh.MESVerification{ClientCert: &mesh.DataSource{Secret: "cert"}, ClientKey: &mesh.DataSource{Secret: "key"}}},
					mesh.MESEndpoint{Address: "api.example.com", Port: 443}),
				mesExample("bad-version", &mesh.MESTLS{Version: &mesh.MESTLSVersion{Min: "TLS13", Max: "TLS12"}}, mesh.MESEndpoint{Address: "api.example.com", Port: 443})),
			problems: []string{`"secret": spec.tls.verification.clientCert.secret: secrets are not supported`, `"bad-version": spec.tls.version: min is above max`}},
	}
}

func mesExample(name string, tls *mesh.MESTLS, eps ...mesh.MESEndpoint) *mesh.MeshExternalService {
	port := uint32(80)
	if tls != nil {
		port = 443
	}
	return &mesh.MeshExternalService{
		Meta: mesh.Meta{Name: name, MetaExtra: &mesh.MetaExtra{MetaLabels: map[string]string{mesh.MeshLabel: "default"}}},
		Spec: mesh.MeshExternalServiceSpec{Match: mesh.MESMatch{Type: "HostnameGenerator", Port: port, Protocol: "tcp"}, Endpoints: eps, TLS: tls},
	}
}

func (sc scenario) build(t testing.TB) (*mesh.Snapshot, *vipalloc.Table) {
	t.Helper()
	s, err := mesh.NewSnapshot(sc.self, sc.res)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return s, sc.table
}

// splitOf describes the tcp_proxy of a listener: "cluster" or "cluster:weight" entries.
func splitOf(t testing.TB, r *Resources, listener string) []string {
	t.Helper()
	for _, l := range r.Listeners {
		if l.Name != listener {
			continue
		}
		tp := &tcpproxy.TcpProxy{}
		if err := l.FilterChains[0].Filters[0].GetTypedConfig().UnmarshalTo(tp); err != nil {
			t.Fatal(err)
		}
		if c := tp.GetCluster(); c != "" {
			return []string{c}
		}
		var out []string
		for _, w := range tp.GetWeightedClusters().GetClusters() {
			out = append(out, fmt.Sprintf("%s:%d", w.Name, w.Weight))
		}
		return out
	}
	t.Fatalf("no listener %q", listener)
	return nil
}

func TestGenerateScenarios(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			s, tab := sc.build(t)
			r, err := Generate(s, tab, sc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("generated resources do not validate:\n%v", err)
			}
			if sc.backend != nil {
				name := "outbound:240.0.0.1:80"
				if !sc.opts.TransparentProxy {
					name = "outbound:127.0.0.1:10001"
				}
				got := splitOf(t, r, name)
				if strings.Join(got, " ") != strings.Join(sc.backend, " ") {
					t.Errorf("backend outbound routes to %v, want %v", got, sc.backend)
				}
				if sc.opts.TransparentProxy {
					if six := splitOf(t, r, "outbound:[fd00:fd00::1]:80"); strings.Join(six, " ") != strings.Join(got, " ") {
						t.Errorf("IPv6 twin routes to %v, IPv4 to %v", six, got)
					}
				}
			}
			if len(r.Problems) != len(sc.problems) {
				t.Errorf("problems = %v, want %d matching %q", r.Problems, len(sc.problems), sc.problems)
			} else {
				for i, p := range r.Problems {
					if !strings.Contains(p.String(), sc.problems[i]) {
						t.Errorf("problem %d = %q, want it to contain %q", i, p, sc.problems[i])
					}
				}
			}
			if sc.conflict != "" && (len(r.Conflicts) != 1 || !strings.Contains(r.Conflicts[0], sc.conflict)) {
				t.Errorf("conflicts = %q, want one containing %q", r.Conflicts, sc.conflict)
			}
			if sc.conflict == "" && len(r.Conflicts) > 0 {
				t.Errorf("unexpected conflicts %q", r.Conflicts)
			}
			checkGolden(t, sc.name, goldenJSON(t, r))
		})
	}
}
