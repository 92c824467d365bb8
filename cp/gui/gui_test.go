package gui

import (
	"context"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/dirstore"
	"github.com/kumadp/kuma-dp/internal/testutil"
)

// The GUI's pages in process, on the directory store holding the bundled example mesh
// (the browser test, gui_e2e_test.go, runs a real control plane on etcd).

// secretMES is a MeshExternalService with a client key inline: the GUI never shows it.
const secretMES = `type: MeshExternalService
name: with-key
mesh: default
spec:
  match:
    type: HostnameGenerator
    port: 443
    protocol: tcp
  endpoints:
  - address: example.com
    port: 443
  tls:
    enabled: true
    verification:
      clientCert:
        inlineString: "-----BEGIN CERTIFICATE-----\nMIIBCERT\n-----END CERTIFICATE-----\n"
      clientKey:
        inlineString: "-----BEGIN PRIVATE KEY-----\n` + testutil.SecretMarker + `\n-----END PRIVATE KEY-----\n"
`

func testServer(t *testing.T) *httptest.Server { return testServerWith(t, "") }

// testServerWith is testServer with more documents in a file of their own.
func testServerWith(t *testing.T, more string) *httptest.Server {
	t.Helper()
	dir := t.TempDir()
	for _, src := range []string{"../../testdata/mesh/policies", "../../testdata/mesh/dataplane.yaml", "../../testdata/routes/shard-a.yaml"} {
		names := []string{src}
		if fi, _ := os.Stat(src); fi.IsDir() {
			names, _ = filepath.Glob(filepath.Join(src, "*.yaml"))
		}
		for _, n := range names {
			b, err := os.ReadFile(n)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, filepath.Base(n)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "secret.yaml"), []byte(secretMES), 0o644); err != nil {
		t.Fatal(err)
	}
	if more != "" {
		if err := os.WriteFile(filepath.Join(dir, "more.yaml"), []byte(more), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := dirstore.NewStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	srv := &api.Server{Store: st, Agents: func() []api.Agent { return []api.Agent{{Mesh: "default", Name: "web-1"}} }}
	apiH := srv.Handler()
	g := New(apiH, "test", nil).Handler()
	mux := http.NewServeMux()
	mux.Handle(Prefix+"/", g)
	mux.Handle("/", apiH)
	hs := httptest.NewServer(mux)
	t.Cleanup(hs.Close)
	return hs
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// Every page renders from the API, with what it is about.
func TestPages(t *testing.T) {
	hs := testServer(t)
	for path, want := range map[string][]string{
		"/gui/":                          {`data-mesh="default"`, `data-mesh="staging"`, `id="agents-total">1<`},
		"/gui/meshes/default/dataplanes": {`data-name="web-1"`, `data-status="Online"`, `id="total">10<`},
		"/gui/meshes/default/dataplanes?status=online":    {`id="total">1<`, `data-name="web-1"`},
		"/gui/meshes/default/dataplanes/web-1":            {"httpbin.mesh", "produced by", `id="listener-count"`, "servicePort: 18080"},
		"/gui/meshes/default/policies":                    {`data-policy="with-key"`, "(hidden)", `data-count="VirtualOutbound">14<`},
		"/gui/meshes/default/routers":                     {`data-router="shard-a"`, "Routes not scheduled", `data-route="shop/web"`},
		"/gui/zones":                                      {"serves no router shard DNS"},
		"/gui/meshes/default/dataplanes/web-1/envoy.json": {`"listeners"`, `"clusters"`},
	} {
		code, body := get(t, hs.URL+path)
		if code != http.StatusOK {
			t.Errorf("%s: %d\n%s", path, code, body)
			continue
		}
		for _, w := range want {
			if !strings.Contains(body, w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
	}
}

// A page that failed (a bad filter: 400, naming it) leaves the next request of the same
// page alone: the error page was once kept for every later request of the page.
func TestErrorPageIsOneRequest(t *testing.T) {
	hs := testServer(t)
	code, body := get(t, hs.URL+"/gui/meshes/default/dataplanes?status=bogus")
	if code != http.StatusBadRequest || !strings.Contains(body, `status &#34;bogus&#34;: want online or offline`) {
		t.Fatalf("bad filter: %d\n%s", code, body)
	}
	code, body = get(t, hs.URL+"/gui/meshes/default/dataplanes")
	if code != http.StatusOK || !strings.Contains(body, `id="dataplanes"`) {
		t.Fatalf("the page after an error: %d\n%s", code, body)
	}
	if code, body := get(t, hs.URL+"/gui/meshes/default/dataplanes/web-1?vfrom=x"); code != http.StatusBadRequest || !strings.Contains(body, `vfrom &#34;x&#34;`) {
		t.Errorf("a bad vfrom: %d\n%s", code, body)
	}
	if code, _ := get(t, hs.URL+"/gui/meshes/default/dataplanes/nope"); code != http.StatusNotFound {
		t.Errorf("a missing dataplane: %d, want 404", code)
	}
}

// No page, nor the Envoy JSON, shows a key held inline.
func TestSecretsNeverShown(t *testing.T) {
	hs := testServer(t)
	for _, path := range []string{"/gui/meshes/default/policies", "/gui/meshes/default/dataplanes/web-1", "/gui/meshes/default/dataplanes/web-1/envoy.json"} {
		code, body := get(t, hs.URL+path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, code, body)
		}
		if strings.Contains(body, testutil.SecretMarker) {
			t.Errorf("%s shows the inline key", path)
		}
	}
	// the API itself returns the resource as applied (writes need the admin token; the
	// GUI is read-only and hides what a browser should not hold)
	r, err := api.NewClient(hs.URL, "").Get(context.Background(), "default", "meshexternalservices", "with-key")
	if err != nil || !strings.Contains(string(r.Spec), testutil.SecretMarker) {
		t.Fatalf("the test's resource is not what it should be: %v", err)
	}
}

// Every answer forbids other origins' scripts and framing.
func TestSecurityHeaders(t *testing.T) {
	hs := testServer(t)
	resp, err := http.Get(hs.URL + "/gui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q", csp)
	}
}

// Each selector's count on the policies page (one pass over the dataplanes) is the total
// of the list it links to (the API's filter).
func TestPolicySelectorCountsAreTheFilters(t *testing.T) {
	hs := testServer(t)
	_, body := get(t, hs.URL+"/gui/meshes/default/policies")
	links := regexp.MustCompile(`<a href="([^"]+)">(\d+) dataplanes</a>`).FindAllStringSubmatch(body, -1)
	if len(links) < 10 {
		t.Fatalf("%d selectors with dataplanes on the page", len(links))
	}
	nonzero := 0
	for _, l := range links {
		href := html.UnescapeString(l[1])
		_, list := get(t, hs.URL+href)
		if !strings.Contains(list, `id="total">`+l[2]+`<`) {
			t.Errorf("%s dataplanes counted for %s, the list says otherwise", l[2], href)
		}
		if l[2] != "0" {
			nonzero++
		}
	}
	if nonzero == 0 {
		t.Error("every selector counts 0 dataplanes")
	}
}

// sameNamedRoutes are two routes named store, of two namespaces: stored as store.shop and
// store.blog, served to agents by their name.
const sameNamedRoutes = `type: Route
name: store
namespace: shop
host: www.acme.test
dnsType: user
to: {service: web, port: 8080}
---
type: Route
name: store
namespace: blog
host: www.acme.test
dnsType: user
to: {service: web, port: 8080}
`

// Two resources of a kind served under one name (routes of two namespaces) leave a
// dataplane's page standing, saying which one its agent gets: the page was a 502 (the
// snapshot refused the duplicate name).
func TestSameNamedRoutesLeaveTheDataplanePage(t *testing.T) {
	hs := testServerWith(t, sameNamedRoutes)
	code, body := get(t, hs.URL+"/gui/meshes/default/dataplanes/web-1")
	if code != http.StatusOK {
		t.Fatalf("%d\n%s", code, body)
	}
	if !strings.Contains(body, `Route &#34;store&#34;: two are stored under this name (default/routes/store.shop is served`) {
		t.Errorf("the page does not say which route is served:\n%s", body)
	}
}
