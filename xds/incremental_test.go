package xds

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/internal/testutil"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// TestGeneratorMatchesGenerate applies random model changes and checks after each one that
// the incremental Generator produces exactly what a fresh Generate does.
func TestGeneratorMatchesGenerate(t *testing.T) {
	services := []string{"a", "b", "c", "d", "e"}
	var entries []*vipalloc.Entry
	for i, svc := range services {
		entries = append(entries, serviceEntry(svc+".mesh", fmt.Sprintf("240.0.0.%d", i+1), fmt.Sprintf("fd00::%d", i+1), 80, tags(mesh.ServiceTag, svc)))
	}
	tab := vipalloc.NewTable(entries, nil)
	self := dataplane("me", "10.9.9.9", inbound(8080, tags(mesh.ServiceTag, "me", "version", "1")))
	self.Networking.Extra().Outbound = []mesh.Outbound{{Port: 9001, Tags: tags(mesh.ServiceTag, "b")}}
	rng := rand.New(rand.NewPCG(1, 2))
	dps := map[string]*mesh.Dataplane{}
	routes := map[string]*mesh.TrafficRoute{}
	randomDP := func(name string) *mesh.Dataplane {
		svc := services[rng.IntN(len(services))]
		in := tags(mesh.ServiceTag, svc, "version", fmt.Sprint(rng.IntN(2)+1))
		// HTTP services (a, b, c) and TCP ones (d, e); now and then an inbound of another
		// protocol turns an HTTP service into a TCP one, and its HTTP rules off.
		if p := map[string]string{"a": "http", "b": "http2", "c": "grpc"}[svc]; p != "" && rng.IntN(5) != 0 {
			if rng.IntN(4) == 0 { // another HTTP protocol: the service's clusters turn HTTP/2 or back
				p = []string{"http", "http2", "grpc"}[rng.IntN(3)]
			}
			in = in.With(mesh.ProtocolTag, p)
		} else if rng.IntN(2) == 0 {
			in = in.With(mesh.ProtocolTag, "tcp")
		}
		d := dataplane(name, fmt.Sprintf("10.0.%d.%d", rng.IntN(3), rng.IntN(250)+1), inbound(8080, in))
		switch rng.IntN(8) { // now and then an inbound that takes no traffic (Kuma's states)
		case 0:
			d.Networking.Inbound[0].Extra().State = mesh.InboundNotReady
		case 1:
			d.Networking.Inbound[0].Extra().Health = &mesh.InboundHealth{Ready: false}
		case 2:
			d.Networking.Inbound[0].Extra().State = mesh.InboundIgnored
		}
		return d
	}
	randomRoute := func(name string) *mesh.TrafficRoute {
		src := tags(mesh.ServiceTag, "me")
		if rng.IntN(2) == 0 {
			src = src.With("version", "1")
		}
		if rng.IntN(4) == 0 {
			src = tags(mesh.ServiceTag, "other") // does not match this dataplane
		}
		d1, d2 := services[rng.IntN(len(services))], services[rng.IntN(len(services))]
		tr := trafficRoute(name, rng.IntN(5), src, tags(mesh.ServiceTag, services[rng.IntN(len(services))]),
			to(uint32(rng.IntN(3)), tags(mesh.ServiceTag, d1, "version", fmt.Sprint(rng.IntN(2)+1))),
			to(uint32(rng.IntN(3)+1), tags(mesh.ServiceTag, d2)))
		// Load balancers: routes to one destination balanced differently have a cluster each.
		tr.LoadBalancer = []json.RawMessage{nil, nil, []byte(`{"roundRobin":{}}`), []byte(`{"leastRequest":{"choiceCount":3}}`),
			[]byte(`{"random":{}}`), []byte(`{"ringHash":{}}`)}[rng.IntN(6)]
		if rng.IntN(2) == 0 {
			tr.HTTP = randomHTTPRules(rng, services)
		}
		return tr
	}
	for i := 0; i < 12; i++ {
		name := fmt.Sprintf("dp-%02d", i)
		dps[name] = randomDP(name)
	}
	gen := NewGenerator()
	httpSteps, mixedSteps := 0, 0
	for step := 0; step < 300; step++ {
		switch rng.IntN(7) {
		case 0, 1:
			name := fmt.Sprintf("dp-%02d", rng.IntN(16))
			if dps[name] != nil && rng.IntN(3) == 0 {
				delete(dps, name)
			} else {
				dps[name] = randomDP(name)
			}
		case 2, 3, 4:
			name := fmt.Sprintf("route-%d", rng.IntN(6))
			if routes[name] != nil && rng.IntN(3) == 0 {
				delete(routes, name)
			} else {
				routes[name] = randomRoute(name)
			}
		case 5: // an unchanged model (new snapshot, same content)
		case 6: // this dataplane changes: full regeneration
			s2 := *self
			s2.Networking.Inbound = []mesh.Inbound{inbound(8080, tags(mesh.ServiceTag, "me", "version", fmt.Sprint(rng.IntN(2)+1)))}
			self = &s2
		}
		var res []mesh.Resource
		for _, d := range dps {
			res = append(res, d)
		}
		for _, r := range routes {
			res = append(res, r)
		}
		s, err := mesh.NewSnapshot(self, res)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := Generate(s, tab, tproxy)
		got, err := gen.Generate(s, tab, tproxy)
		if err != nil {
			t.Fatal(err)
		}
		sameAsFull(t, step, want, got)
		if n := httpOutbounds(want); n > 0 {
			httpSteps++
			if n < len(want.Listeners) {
				mixedSteps++
			}
		}
	}
	if gen.partial < 200 || gen.full < 10 {
		t.Errorf("%d incremental and %d full generations: the test did not exercise both", gen.partial, gen.full)
	}
	if httpSteps < 50 || mixedSteps < 50 {
		t.Errorf("HTTP rules served at %d steps (beside tcp_proxy outbounds at %d): the test did not exercise them", httpSteps, mixedSteps)
	}
	t.Logf("%d incremental, %d full generations", gen.partial, gen.full)
}

// sameAsFull fails unless got (an incremental generation at step) is valid and the same as
// want (a full generation of the same model).
func sameAsFull(t *testing.T, step int, want, got *Resources) {
	t.Helper()
	if err := got.Validate(); err != nil {
		t.Fatalf("step %d: incremental resources invalid: %v", step, err)
	}
	if w, g := goldenJSON(t, want), goldenJSON(t, got); string(w) != string(g) {
		t.Fatalf("step %d: incremental generation differs from a full one:\n%s", step, testutil.FirstDiff(w, g))
	}
}

// randomHTTPRules are one to three HTTP rules of random matches, modifications and
// destinations (a split or one destination, "*" as the service now and then).
func randomHTTPRules(rng *rand.Rand, services []string) []mesh.HTTPRule {
	str := func(s string) *string { return &s }
	rules := make([]mesh.HTTPRule, rng.IntN(3)+1)
	for i := range rules {
		r := &rules[i]
		prefix := fmt.Sprintf("/p%d", rng.IntN(3))
		switch rng.IntN(4) {
		case 0:
			r.Match.Path = &mesh.StringMatcher{Prefix: str(prefix)}
			if rng.IntN(2) == 0 {
				r.Modify = &mesh.HTTPModify{Path: &mesh.HTTPPathRewrite{RewritePrefix: fmt.Sprintf("/r%d", rng.IntN(2))}}
			}
		case 1:
			r.Match.Path = &mesh.StringMatcher{Exact: str(prefix)}
		case 2:
			r.Match.Path = &mesh.StringMatcher{Regex: str(fmt.Sprintf("^/u/([0-9]{%d})$", rng.IntN(3)+1))}
			r.Modify = &mesh.HTTPModify{Path: &mesh.HTTPPathRewrite{Regex: &mesh.RegexReplace{Pattern: "^/u/(.*)$", Substitution: `/users/\1`}}}
		}
		if rng.IntN(2) == 0 {
			r.Match.Method = &mesh.StringMatcher{Exact: str([]string{"GET", "POST"}[rng.IntN(2)])}
		}
		if rng.IntN(2) == 0 || (r.Match.Path == nil && r.Match.Method == nil) {
			r.Match.Headers = map[string]mesh.StringMatcher{"x-v": {Exact: str(fmt.Sprint(rng.IntN(2)))}}
		}
		if rng.IntN(3) == 0 {
			if r.Modify == nil {
				r.Modify = &mesh.HTTPModify{}
			}
			r.Modify.Host = &mesh.HTTPHostRewrite{Value: fmt.Sprintf("h%d.internal", rng.IntN(2))}
			r.Modify.RequestHeaders = &mesh.HTTPHeaderChange{Add: []mesh.HTTPHeaderAdd{{Name: "x-a", Value: "1", Append: rng.IntN(2) == 0}},
				Remove: []mesh.HTTPHeaderRemove{{Name: "x-b"}}}
		}
		svc := services[rng.IntN(len(services))]
		if rng.IntN(4) == 0 {
			svc = mesh.Wildcard
		}
		if rng.IntN(2) == 0 {
			r.Destination = tags(mesh.ServiceTag, svc)
		} else {
			r.Split = []mesh.WeightedDestination{
				to(uint32(rng.IntN(3)+1), tags(mesh.ServiceTag, svc, "version", fmt.Sprint(rng.IntN(2)+1))),
				to(uint32(rng.IntN(2)), tags(mesh.ServiceTag, services[rng.IntN(len(services))])),
			}
		}
	}
	return rules
}

// httpOutbounds counts the outbound listeners serving HTTP rules (an http_connection_manager).
func httpOutbounds(r *Resources) int {
	n := 0
	for _, l := range r.Listeners {
		if strings.HasPrefix(l.Name, "outbound:") && len(l.FilterChains) > 0 && len(l.FilterChains[0].Filters) > 0 &&
			l.FilterChains[0].Filters[0].Name == httpConnectionManagerFilter {
			n++
		}
	}
	return n
}
