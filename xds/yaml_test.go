package xds

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// TestYAMLScenarios decodes scenarios written as users write them (mesh.Load) and generates
// their resources: the L4 TrafficRoute design's corner cases A-F from the repository's testdata/trafficroute
// (no transparent proxy: the outbound is 127.0.0.1:10000) and YAML scenarios under
// testdata/yaml.
func TestYAMLScenarios(t *testing.T) {
	cases := []struct {
		name, dataplane, policies string
		// want: the tcp_proxy of listener (empty: not checked); wantLoadErr: mesh refuses it.
		listener    string
		want        []string
		wantLoadErr string
		golden      string // the golden file's name when not "yaml-" + name (a scenario checked at two listeners)
		// routes: the listener is an http_connection_manager with these routes (describeRoute)
		// instead of a tcp_proxy.
		routes []string
	}{
		{name: "A-identical-selectors", want: []string{"backend{region=eu-west-3}:100"}},
		{name: "B-more-tags", want: []string{"backend{region=eu-west-3}:100"}},
		{name: "C-exact-over-wildcard", want: []string{"backend{region=us-east-1}:100"}},
		{name: "D-different-tags", want: []string{"backend{region=eu-west-3}:100"}},
		{name: "E-one-rule-per-route", wantLoadErr: "rules"},
		{name: "F-later-collision", dataplane: "dataplane-before.yaml", want: []string{"backend{region=us-east-1}:100"}},
		{name: "F-later-collision", want: []string{"backend{region=eu-west-3}:100"}},
		{name: "mes-universal", dataplane: "testdata/yaml/mes-universal/dataplane.yaml", policies: "testdata/yaml/mes-universal/policies",
			listener: "outbound:127.0.0.1:54321", want: []string{"meshexternalservice_httpbin"}},
		// Kuma's forms: a split beats route-all for backend; route-all's wildcard
		// destination is the outbound's own service for redis.
		{name: "kuma-route-split", dataplane: "testdata/yaml/kuma-routes/dataplane.yaml", policies: "testdata/yaml/kuma-routes/policies",
			listener: "outbound:127.0.0.1:10000", want: []string{"backend{version=v1}{leastRequest:4}:90", "backend{version=v2}{leastRequest:4}:10"}, golden: "yaml-kuma-routes"},
		{name: "kuma-route-all", dataplane: "testdata/yaml/kuma-routes/dataplane.yaml", policies: "testdata/yaml/kuma-routes/policies",
			listener: "outbound:127.0.0.1:10001", want: []string{"redis:1"}, golden: "yaml-kuma-routes"},
		// Kuma's conf.http: backend (HTTP) serves the rules, then the route's split; redis
		// (TCP) keeps the tcp_proxy of its route's destination; web (HTTP, routed by
		// route-all without rules) keeps its tcp_proxy.
		{name: "kuma-http-backend", dataplane: "testdata/yaml/kuma-http-routes/dataplane.yaml", policies: "testdata/yaml/kuma-http-routes/policies",
			listener: "outbound:127.0.0.1:10000", golden: "yaml-kuma-http-routes", routes: []string{
				"backend-http/http[0]: prefix /api/ :method=GET x-canary=true -> backend{version=v1}{maglev}:50 backend{version=v2}{maglev}:50 rewrite /" +
					" hash source_ip=true req+x-canary-routed=yes(APPEND_IF_EXISTS_OR_ADD) req-x-canary resp+x-served-by=backend-canary(OVERWRITE_IF_EXISTS_OR_ADD)",
				`backend-http/http[1]: regex ^/users/([0-9]+)/profile$ -> users{maglev}{http2}:1 rewrite ^/users/([0-9]+)/profile$=>/profiles/\1 host users.internal hash source_ip=true`,
				"backend-http: prefix / -> backend{version=v1}{maglev}:90 backend{version=v2}{maglev}:10 hash source_ip=true",
			}},
		{name: "kuma-http-redis", dataplane: "testdata/yaml/kuma-http-routes/dataplane.yaml", policies: "testdata/yaml/kuma-http-routes/policies",
			listener: "outbound:127.0.0.1:10001", want: []string{"redis:1"}, golden: "yaml-kuma-http-routes"},
		{name: "kuma-http-web", dataplane: "testdata/yaml/kuma-http-routes/dataplane.yaml", policies: "testdata/yaml/kuma-http-routes/policies",
			listener: "outbound:127.0.0.1:10002", want: []string{"web:1"}, golden: "yaml-kuma-http-routes"},
	}
	for _, c := range cases {
		dp, pol := c.dataplane, c.policies
		if pol == "" {
			dir := filepath.Join("..", "testdata", "trafficroute", c.name)
			if dp == "" {
				dp = "dataplane.yaml"
			}
			dp, pol = filepath.Join(dir, dp), filepath.Join(dir, "policies")
		}
		golden := "yaml-" + c.name
		if strings.Contains(dp, "before") {
			golden += "-before"
		}
		name := golden
		if c.golden != "" {
			golden = c.golden
		}
		t.Run(name, func(t *testing.T) {
			if _, err := os.Stat(dp); err != nil {
				t.Skipf("scenario not present: %v", err)
			}
			s, err := mesh.Load(dp, pol)
			if c.wantLoadErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantLoadErr) {
					t.Fatalf("mesh.Load: %v, want an error mentioning %q", err, c.wantLoadErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("mesh.Load: %v", err)
			}
			r, err := Generate(s, nil, Options{CABundle: "/etc/ssl/certs/ca-certificates.crt"})
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Validate(); err != nil {
				t.Fatalf("invalid: %v", err)
			}
			if len(r.Problems) > 0 {
				t.Errorf("problems: %v", r.Problems)
			}
			l := c.listener
			if l == "" {
				l = "outbound:127.0.0.1:10000"
			}
			if c.routes != nil {
				m := listenerHCM(t, r, l)
				if m == nil {
					t.Fatalf("%s has no http_connection_manager", l)
				}
				var got []string
				for _, rt := range m.GetRouteConfig().GetVirtualHosts()[0].GetRoutes() {
					got = append(got, describeRoute(rt))
				}
				if strings.Join(got, "\n") != strings.Join(c.routes, "\n") {
					t.Errorf("%s routes:\n%s\nwant:\n%s", l, strings.Join(got, "\n"), strings.Join(c.routes, "\n"))
				}
			} else if got := splitOf(t, r, l); strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("%s routes to %v, want %v", l, got, c.want)
			}
			checkGolden(t, golden, goldenJSON(t, r))
		})
	}
}
