package xds

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// kumaRouteText is one Envoy route in a line: name, match, action, filters.
func kumaRouteText(r *routev3.Route) string {
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
		fmt.Fprintf(&b, " %s=%s", h.GetName(), h.GetStringMatch().GetExact())
	}
	for _, q := range m.GetQueryParameters() {
		fmt.Fprintf(&b, " ?%s=%s", q.GetName(), q.GetStringMatch().GetExact())
	}
	if rd := r.GetRedirect(); rd != nil {
		fmt.Fprintf(&b, " -> redirect %s %s:%d %s", rd.GetSchemeRedirect(), rd.GetHostRedirect(), rd.GetPortRedirect(), rd.GetResponseCode())
	}
	a := r.GetRoute()
	if c := a.GetCluster(); c != "" {
		fmt.Fprintf(&b, " -> %s", c)
	}
	if wc := a.GetWeightedClusters(); wc != nil {
		b.WriteString(" ->")
		for _, w := range wc.GetClusters() {
			fmt.Fprintf(&b, " %s:%d", w.GetName(), w.GetWeight().GetValue())
		}
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
	for _, h := range r.GetRequestHeadersToAdd() {
		fmt.Fprintf(&b, " req+%s=%s(%s)", h.GetHeader().GetKey(), h.GetHeader().GetValue(), h.GetAppendAction())
	}
	for _, h := range r.GetRequestHeadersToRemove() {
		fmt.Fprintf(&b, " req-%s", h)
	}
	for _, h := range r.GetResponseHeadersToAdd() {
		fmt.Fprintf(&b, " resp+%s=%s(%s)", h.GetHeader().GetKey(), h.GetHeader().GetValue(), h.GetAppendAction())
	}
	return b.String()
}

// kuma2Resources generates the Envoy resources of Kuma 2.x's example mesh in one form,
// with the VIPs the agent allocates.
func kuma2Resources(t *testing.T, form string) (*Resources, *vipalloc.Table) {
	t.Helper()
	root := filepath.Join("..", "testdata", "kuma2")
	s, err := mesh.Load(filepath.Join(root, "dataplane.yaml"), filepath.Join(root, form))
	if err != nil {
		t.Fatal(err)
	}
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
		t.Fatalf("%s: invalid: %v", form, err)
	}
	if len(r.Problems) > 0 {
		t.Errorf("%s: problems: %v", form, r.Problems)
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
				out = append(out, kumaRouteText(rt))
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
