package routing

import (
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// User names only inside the domains the operator gave (the users' zones, routers' zones),
// never a public suffix, a top-level domain or arpa (issue 27 item 3: a route in one mesh
// rewrote api.github.com, *.com and in-addr.arpa for every mesh's agents).
func TestCheckUserName(t *testing.T) {
	zones := []string{"users.test", "apps.example.co.uk."}
	routers := []*mesh.Router{router("shard1")}
	tests := []struct {
		route *mesh.Route
		want  string // "" admitted, else a substring of the message
	}{
		{rt("ns", "a", "www.users.test", "", 1), ""},
		{rt("ns", "a", "a.b.users.test", "", 1), ""},
		{rt("ns", "a", "x.users.test", "", 1, wildcard), ""},
		{rt("ns", "a", "web.apps.example.co.uk", "", 1), ""},
		{rt("ns", "a", "x.shard1.apps.example.com", "", 1), ""}, // a router's zone
		{rt("ns", "a", "www", "", 1, system), ""},               // not a user name
		{rt("ns", "a", "api.github.com", "", 1), "in no users' zone"},
		{rt("ns", "a", "users.test.evil.org", "", 1), "in no users' zone"},
		{rt("ns", "a", "xusers.test", "", 1), "in no users' zone"},
		{rt("ns", "a", "www.com", "", 1, wildcard), "the wildcard *.com (host www.com): a top-level domain"},
		{rt("ns", "a", "com", "", 1), "a top-level domain"},
		{rt("ns", "a", "in-addr.arpa", "", 1), "in arpa"},
		{rt("ns", "a", "8.8.8.8.in-addr.arpa", "", 1), "in arpa"},
		{rt("ns", "a", "x.co.uk", "", 1, wildcard), "the wildcard *.co.uk (host x.co.uk): a public suffix"},
		{rt("ns", "a", "github.io", "", 1), "a public suffix"},
	}
	for _, tt := range tests {
		err := CheckUserName(tt.route, zones, routers)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s (%s): refused: %v", tt.route.Host, tt.route.WildcardPolicy, err)
		case tt.want != "" && (err == nil || err.Reason != mesh.ReasonRouteNotAdmitted || !strings.Contains(err.Message, tt.want)):
			t.Errorf("%s (%s): %v, want RouteNotAdmitted with %q", tt.route.Host, tt.route.WildcardPolicy, err, tt.want)
		}
	}
	com := []*mesh.Router{router("evil", func(r *mesh.Router) { r.DNS = "com" })}
	if err := CheckUserName(rt("ns", "a", "api.github.com", "", 1), nil, com); err == nil || !strings.Contains(err.Message, "router evil's zone com, which is not a domain of the operator's") {
		t.Errorf("a user name in the zone of a router whose dns is a top-level domain: %v", err)
	}
	if err := CheckUserName(rt("ns", "a", "www.users.test", "", 1), nil, nil); err == nil || !strings.Contains(err.Message, "none given") {
		t.Errorf("no users' zone given: %v", err)
	}
}

func TestCheckUserZone(t *testing.T) {
	for _, z := range []string{"users.test", "apps.example.com", "acme.co.uk."} {
		if err := CheckUserZone(z); err != nil {
			t.Errorf("%s: %v", z, err)
		}
	}
	for z, want := range map[string]string{"com": "top-level", "co.uk": "public suffix", "github.io": "public suffix",
		"in-addr.arpa": "arpa", "10.in-addr.arpa": "arpa", "bad_name.test": "users' zone \"bad_name.test\"", "": "users' zone \"\""} {
		if err := CheckUserZone(z); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error with %q", z, err, want)
		}
	}
}
