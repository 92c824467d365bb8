package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/store"
)

const routeYAML = `type: Route
name: web
namespace: shop
host: www
to: {service: web, port: 8080}
`

// The route API: no status on create, phase and dns changed only by a RouteBinding, which
// is applied to the route's status at once and only once; a user's apply keeps the status.
func TestRouteStatusRules(t *testing.T) {
	_, _, cl := startAPI(t)
	ctx := context.Background()
	wantErr := func(what string, err error, code int, substr string) {
		t.Helper()
		var ae *Error
		if !errors.As(err, &ae) || ae.Status != code || !strings.Contains(ae.Details, substr) {
			t.Errorf("%s: got %v, want %d with %q", what, err, code, substr)
		}
	}
	_, err := cl.Apply(ctx, "r.yaml", []byte(routeYAML+"status: {phase: scheduled, dns: x.example.com}\n"))
	wantErr("status on create", err, http.StatusBadRequest, "status: set by the control plane")
	if _, err := cl.Apply(ctx, "router.yaml", []byte("type: Router\nname: shard1\ndns: shard1.apps.example.com\n")); err != nil {
		t.Fatal(err)
	}
	if a, err := cl.Apply(ctx, "r.yaml", []byte(routeYAML)); err != nil || a[0].Name != "web.shop" || a[0].Result != "created" {
		t.Fatalf("create: %+v %v", a, err)
	}
	bind := "type: RouteBinding\nname: web.shop\nrouteNamespace: shop\nrouteName: web\nrouter: shard1\ndns: shop-www.shard1.apps.example.com\n"
	if _, err := cl.Apply(ctx, "b.yaml", []byte(bind)); err != nil {
		t.Fatalf("binding: %v", err)
	}
	r, err := cl.Get(ctx, "default", "routes", "web.shop")
	if err != nil || !strings.Contains(string(r.Spec), `"phase":"scheduled"`) || !strings.Contains(string(r.Spec), `"dns":"shop-www.shard1.apps.example.com"`) || !strings.Contains(string(r.Spec), `"routerCanonicalHostname":"router-shard1.shard1.apps.example.com"`) {
		t.Fatalf("route after binding: %s %v", r.Spec, err)
	}
	_, err = cl.Apply(ctx, "b.yaml", []byte(strings.Replace(bind, "shop-www", "other", 1)))
	wantErr("a second binding", err, http.StatusConflict, "")
	// A user's apply of the same file: unchanged; a change keeps the status.
	if a, err := cl.Apply(ctx, "r.yaml", []byte(routeYAML)); err != nil || a[0].Result != "unchanged" {
		t.Errorf("apply again: %+v %v", a, err)
	}
	if _, err := cl.Apply(ctx, "r.yaml", []byte(routeYAML+"path: /cart\n")); err != nil {
		t.Fatal(err)
	}
	if r, _ := cl.Get(ctx, "default", "routes", "web.shop"); !strings.Contains(string(r.Spec), `"phase":"scheduled"`) || !strings.Contains(string(r.Spec), `"/cart"`) {
		t.Errorf("status lost on update: %s", r.Spec)
	}
	_, err = cl.Apply(ctx, "r.yaml", []byte(routeYAML+"status: {phase: new}\n"))
	wantErr("phase change", err, http.StatusBadRequest, `status.phase: only a RouteBinding changes it (value "new", stored "scheduled")`)
	_, err = cl.Apply(ctx, "r.yaml", []byte(routeYAML+"status: {phase: scheduled, dns: evil.example.com}\n"))
	wantErr("dns change", err, http.StatusBadRequest, `status.dns: only a RouteBinding changes it (value "evil.example.com"`)
	// A status with the same phase and dns but another router, a forged admission, a reason:
	// the stored status stays, all of it (the DNS answers a user name from status.router and
	// agents serve hosts by status.ingress: a user's status used to be stored as given).
	before, _ := cl.Get(ctx, "default", "routes", "web.shop")
	forged := routeYAML + "path: /cart\nstatus:\n  phase: scheduled\n  dns: shop-www.shard1.apps.example.com\n  router: shard9\n  reason: Forged\n" +
		"  ingress:\n  - router: shard9\n    host: shop-www.shard1.apps.example.com\n    conditions: [{type: Admitted, status: \"True\"}]\n"
	if _, err := cl.Apply(ctx, "r.yaml", []byte(forged)); err != nil {
		t.Fatal(err)
	}
	after, _ := cl.Get(ctx, "default", "routes", "web.shop")
	if status := func(r Resource) string {
		var m map[string]json.RawMessage
		_ = json.Unmarshal(r.Spec, &m)
		return string(m["status"])
	}; status(after) != status(before) {
		t.Errorf("a user's status was stored:\nbefore %s\nafter  %s", status(before), status(after))
	}
	// A binding whose dns is not the route's name on its router, or to a router that does
	// not take the route: refused, naming the field (it used to be applied to the route's
	// status, served until the reconciler undid it).
	if _, err := cl.Apply(ctx, "router.yaml", []byte("type: Router\nname: blog-only\ndns: blog.apps.example.com\nnamespaceSelector: [blog]\n")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ doc, want string }{
		{"type: RouteBinding\nname: api.shop\nrouteNamespace: shop\nrouteName: api\nrouter: shard1\ndns: www.google.com\n", `dns: the route's name on router shard1 is "shop-www.shard1.apps.example.com" (value "www.google.com")`},
		{"type: RouteBinding\nname: api.shop\nrouteNamespace: shop\nrouteName: api\nrouter: blog-only\ndns: shop-www.blog.apps.example.com\n", "router: blog-only does not take route shop/api"},
	} {
		if _, err := cl.Apply(ctx, "api.yaml", []byte(strings.ReplaceAll(routeYAML, "web", "api"))); err != nil {
			t.Fatal(err)
		}
		_, err = cl.Apply(ctx, "b.yaml", []byte(tc.doc))
		wantErr("a binding that does not fit", err, http.StatusBadRequest, tc.want)
	}
	if r, _ := cl.Get(ctx, "default", "routes", "api.shop"); strings.Contains(string(r.Spec), "scheduled") {
		t.Errorf("a refused binding was applied: %s", r.Spec)
	}
	// A route asked for without its namespace: the 404 says how routes are named.
	_, err = cl.Get(ctx, "default", "routes", "web")
	wantErr("a route without its namespace", err, http.StatusNotFound, "a route is named NAME.NAMESPACE")
	// A binding to a router that does not exist, or of a route that does not.
	_, err = cl.Apply(ctx, "b.yaml", []byte(strings.NewReplacer("web", "api", "shard1\n", "nope\n").Replace(bind)))
	wantErr("unknown router", err, http.StatusBadRequest, `router: no router "nope"`)
	_, err = cl.Apply(ctx, "b.yaml", []byte(strings.ReplaceAll(bind, "web", "nope")))
	wantErr("unknown route", err, http.StatusNotFound, "not found")
}

// The router API: its status is the control plane's (its replicas' readiness, which its DNS
// serves): refused on create; a user's apply without it keeps the stored one and is
// "unchanged" when nothing else changed; one with another status keeps the stored one too.
func TestRouterStatusRules(t *testing.T) {
	_, st, cl := startAPI(t)
	ctx := context.Background()
	const router = "type: Router\nname: shard1\ndns: shard1.apps.example.com\ndataplanes: {kuma.io/service: gw}\n"
	_, err := cl.Apply(ctx, "r.yaml", []byte(router+"status: {desiredReplicas: 2, readyReplicas: 2}\n"))
	var ae *Error
	if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest || !strings.Contains(ae.Details, "router shard1: status: set by the control plane") {
		t.Fatalf("status on create: %v", err)
	}
	if _, err := cl.Apply(ctx, "r.yaml", []byte(router)); err != nil {
		t.Fatal(err)
	}
	// the leader writes the status (as routerstatus does: straight to the store)
	k := store.Key{Mesh: "default", Type: "Router", Name: "shard1"}
	it, err := st.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	withStatus := router + "status: {desiredReplicas: 2, readyReplicas: 1, replicas: [{name: gw-1, address: 10.0.0.1, ready: true}]}\n"
	if _, err := st.Put(ctx, k, []byte(withStatus), it.Version); err != nil {
		t.Fatal(err)
	}
	if a, err := cl.Apply(ctx, "r.yaml", []byte(router)); err != nil || a[0].Result != "unchanged" {
		t.Errorf("apply again: %+v %v", a, err)
	}
	if _, err := cl.Apply(ctx, "r.yaml", []byte(router+"replicas: 3\n")); err != nil {
		t.Fatal(err)
	}
	if r, _ := cl.Get(ctx, "default", "routers", "shard1"); !strings.Contains(string(r.Spec), `"readyReplicas":1`) || !strings.Contains(string(r.Spec), `"replicas":3`) {
		t.Errorf("status lost on update: %s", r.Spec)
	}
	if _, err := cl.Apply(ctx, "r.yaml", []byte(router+"replicas: 3\nstatus: {desiredReplicas: 3, readyReplicas: 3}\n")); err != nil {
		t.Fatal(err)
	}
	if r, _ := cl.Get(ctx, "default", "routers", "shard1"); !strings.Contains(string(r.Spec), `"readyReplicas":1`) {
		t.Errorf("a user's status replaced the control plane's: %s", r.Spec)
	}
}
