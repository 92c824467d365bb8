package xds

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// kuma2Resources generates the Envoy resources of Kuma 2.x's example mesh in one form,
// with the VIPs the agent allocates.
func kuma2Resources(t *testing.T, form string) (*Resources, *vipalloc.Table) {
	t.Helper()
	root := filepath.Join("..", "testdata", "kuma2")
	s, err := mesh.Load(filepath.Join(root, "dataplane.yaml"), filepath.Join(root, form))
	if err != nil {
		t.Fatal(err)
	}
	r, tb := generateWithVIPs(t, s)
	if len(r.Problems) > 0 {
		t.Errorf("%s: problems: %v", form, r.Problems)
	}
	return r, tb
}

// generateWithVIPs generates s's resources (transparent proxy on) with the VIPs the
// agent's allocator gives, and checks them against Envoy's protos.
func generateWithVIPs(t *testing.T, s *mesh.Snapshot) (*Resources, *vipalloc.Table) {
	t.Helper()
	a, err := vipalloc.New(vipalloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	tb, err := a.Allocate(s)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Generate(s, tb, Options{TransparentProxy: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Validate(); err != nil {
		t.Fatalf("invalid: %v", err)
	}
	return r, tb
}

func vipListener(t *testing.T, tb *vipalloc.Table, host string, port uint32) string {
	t.Helper()
	e, ok := tb.Lookup(host)
	if !ok {
		t.Fatalf("%s has no VIP", host)
	}
	return fmt.Sprintf("outbound:%s:%d", e.IPv4(), port)
}

// Kuma's documented MeshService, MeshHTTPRoute and MeshTCPRoute examples, both forms: each
// MeshService port is a listener on its VIP to a cluster of the selected inbounds; the
// route policies merge onto the outbounds they name, in Kuma's order, and the two forms
// give the same resources.
func TestKumaMeshServicesAndRoutes(t *testing.T) {
	var golden []byte
	for _, form := range []string{"universal", "kubernetes"} {
		r, tb := kuma2Resources(t, form)
		routes := func(l string) string {
			m := listenerHCM(t, r, l)
			if m == nil {
				t.Fatalf("%s: %s has no http_connection_manager", form, l)
			}
			var out []string
			for _, rt := range m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
				out = append(out, describeRoute(rt))
			}
			return strings.Join(out, "\n")
		}
		// route-to-backend-v2 (targetRef Dataplane by labels) on the MeshService backend.
		want := strings.Join([]string{
			"route-to-backend-v2/rules[0]/matches[0]: segments /v2 -> meshservice_backend-v2_3001",
			"backend.kuma-demo.mesh: prefix / -> meshservice_backend_3001",
		}, "\n")
		if got := routes(vipListener(t, tb, "backend.kuma-demo.mesh", 3001)); got != want {
			t.Errorf("%s: backend's routes:\n%s\nwant:\n%s", form, got, want)
		}
		// The three routes naming the kuma.io/service (the older form), merged: the exact
		// path first, then the header match, then the catch-all split.
		want = strings.Join([]string{
			"http-route-2/rules[0]/matches[0]: path / -> backend_kuma-demo_svc_3001 req+x-custom-header=xyz(OVERWRITE_IF_EXISTS_OR_ADD)",
			"http-route-3/rules[1]/matches[0]: prefix / mirror-this-request=true -> backend_kuma-demo_svc_3001{version=v0}" +
				" mirror backend_kuma-demo_svc_3001{version=v1_experimental} 300000/1000000",
			"http-route-1/rules[2]/matches[0]: prefix / -> backend_kuma-demo_svc_3001{version=v0}:90 backend_kuma-demo_svc_3001{version=v1}:10",
		}, "\n")
		if got := routes(vipListener(t, tb, "backend_kuma-demo_svc_3001.mesh", 80)); got != want {
			t.Errorf("%s: backend_kuma-demo_svc_3001's routes:\n%s\nwant:\n%s", form, got, want)
		}
		// tcp-route-1 redirects redis's port 6739 (sectionName) to external-backend; its
		// other port keeps its own cluster, the inbound named by targetPort.name.
		if got := splitOf(t, r, vipListener(t, tb, "redis.svc.mesh.local", 6739)); strings.Join(got, " ") != "external-backend:1" {
			t.Errorf("%s: redis:6739 goes to %v, want external-backend", form, got)
		}
		if got := splitOf(t, r, vipListener(t, tb, "redis.svc.mesh.local", 16739)); strings.Join(got, " ") != "meshservice_redis_16739" {
			t.Errorf("%s: redis:16739 goes to %v", form, got)
		}
		eps := map[string]string{}
		for _, cla := range r.Endpoints {
			var addrs []string
			for _, le := range cla.GetEndpoints() {
				for _, e := range le.GetLbEndpoints() {
					sa := e.GetEndpoint().GetAddress().GetSocketAddress()
					addrs = append(addrs, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
				}
			}
			eps[cla.ClusterName] = strings.Join(addrs, ",")
		}
		for c, want := range map[string]string{
			"meshservice_redis_16739":     "10.0.0.30:26739",
			"meshservice_backend_3001":    "10.0.0.20:3001,10.0.0.21:3001,10.0.0.22:3001",
			"meshservice_backend-v2_3001": "10.0.0.23:3001",
		} {
			if eps[c] != want {
				t.Errorf("%s: %s endpoints %q, want %q", form, c, eps[c], want)
			}
		}
		j := goldenJSON(t, r)
		if golden != nil && !bytes.Equal(golden, j) {
			t.Errorf("the Kubernetes form gives other resources than the universal form")
		}
		golden = j
	}
	checkGolden(t, "kuma2-example-mesh", golden)
}

// kumaMesh generates the resources of the documents docs beside a dataplane web (the
// agent's, tagged app: web, labelled team: a) and backend's v1 and v2 (HTTP on 8080), with
// a MeshService backend and a generator naming it backend.mesh.local.
func kumaMesh(t *testing.T, docs string) (*Resources, *vipalloc.Table) {
	t.Helper()
	base := `type: Dataplane
name: web-1
labels: {team: a}
networking:
  address: 10.1.0.1
  inbound:
  - port: 8080
    tags: {kuma.io/service: web, app: web}
---
type: Dataplane
name: backend-1
networking:
  address: 10.1.0.2
  inbound:
  - {port: 8080, tags: {kuma.io/service: backend, kuma.io/protocol: http, app: backend, version: v1}}
---
type: Dataplane
name: backend-2
networking:
  address: 10.1.0.3
  inbound:
  - {port: 8080, tags: {kuma.io/service: backend, kuma.io/protocol: http, app: backend, version: v2}}
---
type: MeshService
name: backend
spec:
  selector: {dataplaneTags: {app: backend}}
  ports: [{name: http, port: 80, targetPort: 8080, appProtocol: http}]
---
type: HostnameGenerator
name: local
spec:
  selector: {meshService: {matchLabels: {}}}
  template: "{{ .DisplayName }}.mesh.local"
---
`
	rs, err := mesh.Decode("mesh.yaml", []byte(base+docs))
	if err != nil {
		t.Fatal(err)
	}
	s, err := mesh.NewSnapshot(rs[0].(*mesh.Dataplane), rs)
	if err != nil {
		t.Fatal(err)
	}
	return generateWithVIPs(t, s)
}

func routesOf(t *testing.T, r *Resources, l string) string {
	t.Helper()
	m := listenerHCM(t, r, l)
	if m == nil {
		t.Fatalf("%s has no http_connection_manager", l)
	}
	var out []string
	for _, rt := range m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
		out = append(out, describeRoute(rt))
	}
	return strings.Join(out, "\n")
}

// Every MeshHTTPRoute match and filter Kuma documents, on a MeshService's outbound, as
// Envoy routes that pass Envoy's protos.
func TestKumaMeshHTTPRouteMatchesAndFilters(t *testing.T) {
	r, tb := kumaMesh(t, `type: MeshHTTPRoute
name: all
spec:
  targetRef: {kind: Mesh}
  to:
  - targetRef: {kind: MeshService, name: backend}
    rules:
    - matches: [{path: {type: RegularExpression, value: "^/u/[0-9]+$"}, method: GET}]
      default:
        filters:
        - type: URLRewrite
          urlRewrite: {hostname: users.internal, path: {type: ReplaceFullPath, replaceFullPath: /users}}
        - type: ResponseHeaderModifier
          responseHeaderModifier: {add: [{name: x-served, value: "1"}]}
    - matches: [{path: {type: PathPrefix, value: /old}}]
      default:
        filters:
        - type: RequestRedirect
          requestRedirect: {scheme: https, hostname: new.example.com, port: 8443, statusCode: 301}
    - matches: [{path: {type: PathPrefix, value: /api/}, queryParams: [{type: Exact, name: v, value: "2"}]}]
      default:
        filters:
        - type: URLRewrite
          urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /v2/}}
        - type: RequestHeaderModifier
          requestHeaderModifier: {add: [{name: x-a, value: b}], remove: [x-debug]}
        backendRefs:
        - {kind: MeshServiceSubset, name: backend, tags: {version: v2}, weight: 3}
        - {kind: MeshService, name: backend, port: 80, weight: 1}
`)
	got := routesOf(t, r, vipListener(t, tb, "backend.mesh.local", 80))
	want := strings.Join([]string{
		"all/rules[0]/matches[0]: prefix /api/ ?v=2 -> meshservice_backend_80{version=v2}:3 meshservice_backend_80:1 rewrite /v2/ req+x-a=b(APPEND_IF_EXISTS_OR_ADD) req-x-debug",
		"all/rules[1]/matches[0]: segments /old -> redirect https new.example.com:8443 MOVED_PERMANENTLY",
		"all/rules[2]/matches[0]: regex ^/u/[0-9]+$ :method=GET -> meshservice_backend_80 rewrite ^.*$=>/users host users.internal resp+x-served=1(APPEND_IF_EXISTS_OR_ADD)",
		"backend.mesh.local: prefix / -> meshservice_backend_80",
	}, "\n")
	if got != want {
		t.Errorf("routes:\n%s\nwant:\n%s", got, want)
	}
}

// Kuma's merge order: policies by targetRef specificity (Mesh, MeshSubset, MeshService,
// MeshServiceSubset, Dataplane), then by name, each later one overriding the same matches;
// a MeshHTTPRoute beats a TrafficRoute of the same outbound; a policy whose targetRef does
// not select this dataplane is not applied.
func TestKumaRouteMergeOrder(t *testing.T) {
	route := func(name, ref, backendVersion string) string {
		return fmt.Sprintf(`type: MeshHTTPRoute
name: %s
spec:
  targetRef: %s
  to:
  - targetRef: {kind: MeshService, name: backend}
    rules:
    - matches: [{path: {type: PathPrefix, value: /}}]
      default:
        backendRefs: [{kind: MeshServiceSubset, name: backend, tags: {version: %s}}]
---
`, name, ref, backendVersion)
	}
	for _, tc := range []struct {
		docs, want string
	}{
		{route("z-mesh", "{kind: Mesh}", "v1") + route("a-subset", "{kind: MeshSubset, tags: {app: web}}", "v2"), "v2"},
		{route("a-dp", "{kind: Dataplane, labels: {team: a}}", "v2") + route("z-svc", "{kind: MeshService, name: web}", "v1"), "v2"},
		{route("a", "{kind: Mesh}", "v1") + route("b", "{kind: Mesh}", "v2"), "v2"},                     // equal: the later name
		{route("a", "{kind: Mesh}", "v1") + route("b", "{kind: MeshService, name: other}", "v2"), "v1"}, // b selects another service's dataplanes
		{route("named", "{kind: Dataplane, name: web-1}", "v2") + route("labels", "{kind: Dataplane, labels: {team: a}}", "v1"), "v2"},
	} {
		r, tb := kumaMesh(t, tc.docs)
		got := routesOf(t, r, vipListener(t, tb, "backend.mesh.local", 80))
		if !strings.Contains(got, "meshservice_backend_80{version="+tc.want+"}") || strings.Count(got, "\n") != 0 {
			t.Errorf("%swinner:\n%s\nwant version %s", tc.docs, got, tc.want)
		}
	}
	// The older form: a TrafficRoute splitting api, and a MeshHTTPRoute naming the
	// kuma.io/service api (no MeshService has the name): the MeshHTTPRoute wins on api's
	// outbounds, as in Kuma.
	r, tb := kumaMesh(t, `type: Dataplane
name: api-1
networking:
  address: 10.1.0.4
  inbound: [{port: 8080, tags: {kuma.io/service: api, kuma.io/protocol: http, version: v1}}]
---
type: Dataplane
name: api-2
networking:
  address: 10.1.0.5
  inbound: [{port: 8080, tags: {kuma.io/service: api, kuma.io/protocol: http, version: v2}}]
---
type: TrafficRoute
name: split
sources: [{match: {kuma.io/service: "*"}}]
destinations: [{match: {kuma.io/service: api}}]
conf:
  split: [{weight: 1, destination: {kuma.io/service: api, version: v1}}]
---
type: MeshHTTPRoute
name: new
spec:
  to:
  - targetRef: {kind: MeshService, name: api}
    rules:
    - default: {backendRefs: [{kind: MeshServiceSubset, name: api, tags: {version: v2}}]}
`)
	if got := routesOf(t, r, vipListener(t, tb, "api.mesh", 80)); got != "new/rules[0]/matches[0]: prefix / -> api{version=v2}" {
		t.Errorf("api.mesh: %s, want the MeshHTTPRoute's api v2 over the TrafficRoute's v1", got)
	}
}

// A MeshTCPRoute applies to a TCP destination and, with no MeshHTTPRoute, to an HTTP one; a
// MeshHTTPRoute is not applied to a TCP destination (Kuma's rule); an outbound written with
// backendRef kind MeshService is a listener to the MeshService's port.
func TestKumaTCPRouteAndOutboundBackendRef(t *testing.T) {
	r, tb := kumaMesh(t, `type: MeshTCPRoute
name: tcp
spec:
  to:
  - targetRef: {kind: MeshService, name: backend}
    rules:
    - default: {backendRefs: [{kind: MeshServiceSubset, name: backend, tags: {version: v1}, weight: 1}, {kind: MeshService, name: web}]}
`)
	l := vipListener(t, tb, "backend.mesh.local", 80)
	if got := splitOf(t, r, l); strings.Join(got, " ") != "meshservice_backend_80{version=v1}:1 web:1" {
		t.Errorf("%s: %v", l, got)
	}
	r, tb = kumaMesh(t, `type: MeshHTTPRoute
name: http
spec:
  to:
  - targetRef: {kind: MeshService, name: web}
    rules:
    - default: {backendRefs: [{kind: MeshService, name: backend}]}
`)
	if got := splitOf(t, r, vipListener(t, tb, "web.mesh", 80)); strings.Join(got, " ") != "web" {
		t.Errorf("web (TCP) took a MeshHTTPRoute: %v", got)
	}
	rs, err := mesh.Decode("self.yaml", []byte(`type: Dataplane
name: web-1
networking:
  address: 10.1.0.1
  inbound: [{port: 8080, tags: {kuma.io/service: web}}]
  outbound: [{port: 10000, backendRef: {kind: MeshService, name: backend, port: 80}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	others, _ := mesh.Decode("o.yaml", []byte(`type: Dataplane
name: backend-1
networking:
  address: 10.1.0.2
  inbound: [{port: 8080, tags: {kuma.io/service: backend, app: backend}}]
---
type: MeshService
name: backend
spec:
  selector: {dataplaneTags: {app: backend}}
  ports: [{port: 80, targetPort: 8080}]
`))
	s, err := mesh.NewSnapshot(rs[0].(*mesh.Dataplane), others)
	if err != nil {
		t.Fatal(err)
	}
	gen, err := Generate(s, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := gen.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := splitOf(t, gen, "outbound:127.0.0.1:10000"); strings.Join(got, " ") != "meshservice_backend_80" || len(gen.Problems) > 0 {
		t.Errorf("the backendRef outbound goes to %v (problems %v)", got, gen.Problems)
	}
}

// A MeshHTTPRoute naming a MeshExternalService (Kuma 2.9's to[].targetRef) configures its
// outbound: a header added before the request leaves for the external endpoint.
func TestKumaRouteToMeshExternalService(t *testing.T) {
	r, tb := kumaMesh(t, `type: MeshExternalService
name: httpbin
spec:
  match: {port: 80, protocol: http}
  endpoints: [{address: 192.168.0.9, port: 8080}]
---
type: HostnameGenerator
name: ext
spec:
  selector: {meshExternalService: {matchLabels: {}}}
  template: "{{ .DisplayName }}.extsvc.mesh.local"
---
type: MeshHTTPRoute
name: to-httpbin
spec:
  to:
  - targetRef: {kind: MeshExternalService, name: httpbin}
    rules:
    - default:
        filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-from, value: mesh}]}}]
`)
	want := "to-httpbin/rules[0]/matches[0]: prefix / -> meshexternalservice_httpbin req+x-from=mesh(OVERWRITE_IF_EXISTS_OR_ADD)"
	if got := routesOf(t, r, vipListener(t, tb, "httpbin.extsvc.mesh.local", 80)); got != want {
		t.Errorf("httpbin's routes:\n%s\nwant:\n%s", got, want)
	}
	if len(r.Problems) > 0 {
		t.Errorf("problems: %v", r.Problems)
	}
}
