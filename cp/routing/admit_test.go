package routing

import (
	"strings"
	"testing"
	"time"

	"github.com/kumadp/kuma-dp/mesh"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// rt is a user-DNS route: ns/name host[/path], created at t0+age seconds.
func rt(ns, name, host, path string, age int, opts ...func(*mesh.Route)) *mesh.Route {
	r := &mesh.Route{Meta: mesh.Meta{Name: name, MetaExtra: &mesh.MetaExtra{MetaCreationTime: t0.Add(time.Duration(age) * time.Second)}},
		Namespace: ns, Host: host, Path: path, DNSType: mesh.DNSTypeUser, To: mesh.RouteTarget{Service: "web", Port: 80}}
	for _, o := range opts {
		o(r)
	}
	return r
}

func wildcard(r *mesh.Route) { r.WildcardPolicy = mesh.WildcardSubdomain }

func system(r *mesh.Route) { r.DNSType = mesh.DNSTypeSystem }

func router(name string, opts ...func(*mesh.Router)) *mesh.Router {
	r := &mesh.Router{Meta: mesh.Meta{Name: name}, DNS: name + ".apps.example.com"}
	for _, o := range opts {
		o(r)
	}
	return r
}

func interNamespace(r *mesh.Router) {
	r.RouteAdmission.NamespaceOwnership = mesh.NamespaceOwnershipAllowed
}
func wildcardsOn(r *mesh.Router) { r.RouteAdmission.WildcardPolicy = mesh.WildcardsAllowed }

// want: route key -> "" (admitted) or "Reason: message substring".
func TestAdmit(t *testing.T) {
	tests := []struct {
		name   string
		router *mesh.Router
		routes []*mesh.Route
		want   map[string]string
	}{
		{"oldest owns host and path", router("r"), []*mesh.Route{
			rt("a", "new", "www.acme.test", "", 2), rt("a", "old", "www.acme.test", "", 1)},
			map[string]string{"a/old": "", "a/new": "HostAlreadyClaimed: route a/old has host www.acme.test and is older"}},
		{"same age: namespace/name decides", router("r"), []*mesh.Route{
			rt("a", "y", "www.acme.test", "", 1), rt("a", "x", "www.acme.test", "", 1)},
			map[string]string{"a/x": "", "a/y": "HostAlreadyClaimed: route a/x"}},
		{"same namespace shares a host by path", router("r"), []*mesh.Route{
			rt("a", "cart", "www.acme.test", "/cart", 1), rt("a", "api", "www.acme.test", "/api", 2), rt("a", "api2", "www.acme.test", "/api", 3)},
			map[string]string{"a/cart": "", "a/api": "", "a/api2": "HostAlreadyClaimed: route a/api has host www.acme.test/api"}},
		{"strict: another namespace cannot take a path", router("r"), []*mesh.Route{
			rt("a", "root", "www.acme.test", "/", 1), rt("b", "steal", "www.acme.test", "/admin", 2)},
			map[string]string{"a/root": "", "b/steal": "HostAlreadyClaimed: a route in another namespace holds host www.acme.test"}},
		{"inter-namespace allowed: other paths ok, same path not", router("r", interNamespace), []*mesh.Route{
			rt("a", "root", "www.acme.test", "/", 1), rt("b", "admin", "www.acme.test", "/admin", 2), rt("b", "root", "www.acme.test", "/", 3)},
			map[string]string{"a/root": "", "b/admin": "", "b/root": "HostAlreadyClaimed: route a/root"}},
		{"wildcards off unless allowed", router("r"), []*mesh.Route{
			rt("a", "w", "www.acme.test", "", 1, wildcard)},
			map[string]string{"a/w": "RouteNotAdmitted: wildcard routes are not allowed on router r"}},
		{"unknown wildcard policy", router("r", wildcardsOn), []*mesh.Route{
			rt("a", "w", "www.acme.test", "", 1, func(r *mesh.Route) { r.WildcardPolicy = "Everything" })},
			map[string]string{"a/w": `RouteNotAdmitted: unsupported wildcard policy "Everything"`}},
		{"a wildcard blocks other namespaces' hosts under it", router("r", wildcardsOn), []*mesh.Route{
			rt("a", "w", "www.acme.test", "", 1, wildcard), rt("b", "shop", "shop.acme.test", "", 2), rt("a", "mine", "shop.acme.test", "/x", 3),
			rt("b", "apex", "acme.test", "", 4), rt("b", "deeper", "a.b.acme.test", "", 5)},
			map[string]string{"a/w": "", "b/shop": "HostAlreadyClaimed: a route in another namespace holds the wildcard *.acme.test", "a/mine": "",
				"b/apex": "", "b/deeper": "HostAlreadyClaimed: a route in another namespace holds *.acme.test, which host a.b.acme.test under it would hide"}},
		// Item 2 of issue 27: a user name one level below another namespace's system name
		// made that name exist with no data, so the shard's wildcard stopped answering it.
		{"strict: a user name under another namespace's system name", router("r"), []*mesh.Route{
			rt("shop", "web", "www", "", 1, system), rt("blog", "z4", "a.shop-www.r.apps.example.com", "", 2),
			rt("shop", "own", "b.shop-www.r.apps.example.com", "", 3), rt("blog", "cname", "x.cart.acme.test", "", 5),
			rt("shop", "cart", "cart.acme.test", "", 4)},
			map[string]string{"shop/web": "", "blog/z4": "HostAlreadyClaimed: a route in another namespace holds shop-www.r.apps.example.com, which host a.shop-www.r.apps.example.com under it would hide",
				"shop/own": "", "shop/cart": "", "blog/cname": ""}},
		{"strict: an older name under a newer system name keeps it, and so does the system route", router("r"), []*mesh.Route{
			rt("blog", "z4", "a.shop-www.r.apps.example.com", "", 1), rt("shop", "web", "www", "", 2, system)},
			map[string]string{"blog/z4": "", "shop/web": ""}},
		{"inter-namespace allowed: a user name under another namespace's system name", router("r", interNamespace), []*mesh.Route{
			rt("shop", "web", "www", "", 1, system), rt("blog", "z4", "a.shop-www.r.apps.example.com", "", 2)},
			map[string]string{"shop/web": "", "blog/z4": ""}},
		{"a host blocks other namespaces' wildcards over it", router("r", wildcardsOn), []*mesh.Route{
			rt("b", "shop", "shop.acme.test", "", 1), rt("a", "w", "*.acme.test", "", 2, wildcard), rt("b", "w", "www.acme.test", "", 3, wildcard)},
			map[string]string{"b/shop": "", "a/w": "HostAlreadyClaimed: a route in another namespace holds shop.acme.test, under the wildcard *.acme.test", "b/w": ""}},
		{"the same wildcard twice", router("r", wildcardsOn), []*mesh.Route{
			rt("a", "w1", "www.acme.test", "", 1, wildcard), rt("a", "w2", "api.acme.test", "", 2, wildcard)},
			map[string]string{"a/w1": "", "a/w2": "HostAlreadyClaimed: route a/w1 has host www.acme.test and is older"}},
		// openshift/origin#11496: example.com held must not block bar.example.com; every
		// route on com gets an answer.
		{"origin#11496", router("r", wildcardsOn), []*mesh.Route{
			rt("a", "apex", "example.com", "", 1), rt("b", "bar", "bar.example.com", "", 2), rt("c", "com", "foo.com", "", 3), rt("d", "com2", "foo.com", "", 4)},
			map[string]string{"a/apex": "", "b/bar": "", "c/com": "", "d/com2": "HostAlreadyClaimed: a route in another namespace holds host foo.com"}},
		{"system names: the final name is what is claimed", router("r"), []*mesh.Route{
			rt("a", "x", "www", "", 1, func(r *mesh.Route) { r.DNSType = mesh.DNSTypeSystem }),
			rt("b", "x", "www", "", 2, func(r *mesh.Route) { r.DNSType = mesh.DNSTypeSystem }),
			rt("a", "y", "www", "", 3, func(r *mesh.Route) { r.DNSType = mesh.DNSTypeSystem })},
			map[string]string{"a/x": "", "b/x": "", "a/y": "HostAlreadyClaimed: route a/x has host a-www.r.apps.example.com"}},
		{"a final name over 253 characters", router("r"), []*mesh.Route{
			rt("a", "x", strings.Repeat("abcdefgh.", 27), "", 1, func(r *mesh.Route) { r.DNSType = mesh.DNSTypeSystem; r.Host = strings.TrimSuffix(r.Host, ".") })},
			map[string]string{"a/x": "RouteNotAdmitted: the final name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Admit(tt.router, tt.routes)
			if len(got) != len(tt.routes) {
				t.Errorf("%d answers for %d routes: %v", len(got), len(tt.routes), got)
			}
			for k, w := range tt.want {
				check(t, k, got[k], w)
			}
		})
	}
}

func check(t *testing.T, k string, ad Admission, want string) {
	t.Helper()
	if want == "" {
		if !ad.Admitted {
			t.Errorf("%s: not admitted: %s: %s", k, ad.Reason, ad.Message)
		}
		return
	}
	if got := ad.Reason + ": " + ad.Message; ad.Admitted || !strings.HasPrefix(got, want) {
		t.Errorf("%s: got admitted=%v %q, want %q", k, ad.Admitted, got, want)
	}
}

// An older route arriving later displaces the holder; a host change or a deletion releases
// claims at once (openshift/router PR #736); a route replaced by a new version never
// conflicts with itself (openshift/origin#8388).
func TestAdmitterChanges(t *testing.T) {
	a := NewAdmitter(router("r"))
	newer := rt("b", "newer", "www.acme.test", "", 10)
	a.Set(newer)
	ch := a.Changes()
	check(t, "b/newer", ch["b/newer"], "")

	older := rt("a", "older", "www.acme.test", "", 1)
	a.Set(older)
	ch = a.Changes()
	check(t, "a/older", ch["a/older"], "")
	check(t, "b/newer (displaced)", ch["b/newer"], "HostAlreadyClaimed: a route in another namespace holds host www.acme.test")

	// #8388: replacing the holder (same key, new content) keeps it admitted.
	replaced := *older
	replaced.Path = "/"
	a.Set(&replaced)
	a.Changes()
	ad, _ := a.Admission("a/older")
	check(t, "a/older replaced", ad, "")

	// PR #736: the holder moves to another host: the old host is free at once.
	moved := replaced
	moved.Host = "api.acme.test"
	a.Set(&moved)
	ch = a.Changes()
	check(t, "b/newer after the host change", ch["b/newer"], "")
	if _, again := ch["a/older"]; !again {
		t.Error("the moved route's new host is not reported")
	}

	// Deletion releases too.
	c := rt("c", "late", "api.acme.test", "", 20)
	a.Set(c)
	a.Changes()
	ad, _ = a.Admission("c/late")
	check(t, "c/late while a/older holds", ad, "HostAlreadyClaimed")
	a.Delete("a/older")
	ch = a.Changes()
	check(t, "c/late after deletion", ch["c/late"], "")
	if ad, ok := a.Admission("a/older"); ok || a.Len() != 2 {
		t.Errorf("deleted route still answered: %v", ad)
	}
	if ch := a.Changes(); len(ch) != 0 {
		t.Errorf("no change, yet %v", ch)
	}
}
