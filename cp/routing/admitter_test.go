package routing

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// The incremental admitter decides as Admit over every route does, whatever the sequence
// of changes: routes added, replaced (host, path, namespace, wildcard, age) and removed, on
// names one above the other (wildcards over hosts, hosts under system names, apexes), in
// each router policy; and Changes reports exactly the routes whose admission changed.
func TestAdmitterDecidesAsAdmit(t *testing.T) {
	routers := map[string]*mesh.Router{
		"strict": router("r"), "strict, wildcards": router("r", wildcardsOn),
		"inter-namespace, wildcards": router("r", interNamespace, wildcardsOn),
	}
	for name, rr := range routers {
		t.Run(name, func(t *testing.T) {
			for seed := range uint64(20) {
				admitterAgainstAdmit(t, rr, rand.New(rand.NewPCG(seed, 31)))
			}
		})
	}
}

func admitterAgainstAdmit(t *testing.T, rr *mesh.Router, rnd *rand.Rand) {
	t.Helper()
	a := NewAdmitter(rr)
	routes := map[string]*mesh.Route{}
	last := map[string]Admission{}
	for step := range 400 {
		if rnd.IntN(4) == 0 && len(routes) > 0 {
			for k := range routes {
				a.Delete(k)
				delete(routes, k)
				break
			}
		} else {
			r := randomRoute(rnd, rr)
			a.Set(r)
			routes[RouteKey(r)] = r
		}
		if rnd.IntN(3) != 0 {
			continue
		}
		changed := a.Changes()
		all := make([]*mesh.Route, 0, len(routes))
		for _, r := range routes {
			all = append(all, r)
		}
		want := Admit(rr, all)
		for k, w := range want {
			got, ok := a.Admission(k)
			if !ok || got != w {
				t.Fatalf("step %d: %s: incremental %+v, Admit over every route %+v", step, k, got, w)
			}
			if c, reported := changed[k]; (last[k] != w || !hasKey(last, k)) != reported || reported && c != w {
				t.Fatalf("step %d: %s: reported %v (%+v), was %+v, now %+v", step, k, reported, c, last[k], w)
			}
		}
		if a.Len() != len(want) {
			t.Fatalf("step %d: %d routes, want %d", step, a.Len(), len(want))
		}
		last = want
	}
	for k := range routes {
		a.Delete(k)
	}
	a.Changes()
	if len(a.at)+len(a.below)+len(a.kids)+len(a.node)+len(a.last) != 0 {
		t.Fatalf("every route deleted, yet the admitter holds %d nodes, %d counts, %d parents, %d routes' nodes, %d admissions", len(a.at), len(a.below), len(a.kids), len(a.node), len(a.last))
	}
}

func hasKey(m map[string]Admission, k string) bool {
	_, ok := m[k]
	return ok
}

// randomRoute is one of 30 routes (by namespace/name) with a random name on a small tree:
// user hosts in acme.test and under the router's zone, wildcards, system names (a few too
// long to be a name), paths and ages that tie.
func randomRoute(rnd *rand.Rand, rr *mesh.Router) *mesh.Route {
	ns := []string{"a", "b", "c"}[rnd.IntN(3)]
	name := fmt.Sprint("r", rnd.IntN(30))
	labels := []string{"www", "api", "x", "a-www", "b-api"}
	domains := []string{"acme.test", "a.acme.test", "x.a.acme.test", "test", rr.DNS, "api." + rr.DNS, "a-www." + rr.DNS}
	host := labels[rnd.IntN(len(labels))] + "." + domains[rnd.IntN(len(domains))]
	if rnd.IntN(6) == 0 {
		host = domains[rnd.IntN(len(domains))] // an apex, or a name one label up
	}
	var opts []func(*mesh.Route)
	switch rnd.IntN(6) {
	case 0:
		opts = append(opts, wildcard)
	case 1:
		host = labels[rnd.IntN(len(labels))]
		if rnd.IntN(5) == 0 {
			host = strings.Repeat("y", 62)
		}
		opts = append(opts, system)
	}
	path := []string{"", "", "/x", "/y"}[rnd.IntN(4)]
	r := rt(ns, name, host, path, rnd.IntN(5), opts...)
	if rnd.IntN(20) == 0 {
		r.WildcardPolicy = "Other"
	}
	return r
}
