package routing

import (
	"fmt"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
)

// BenchmarkAdmit1000: one router's admission of 1,000 routes (the scheduler's pass does it
// for each router): 7 namespaces, system and user names, a wildcard every 50th, some hosts
// shared by path and some claimed across namespaces (refused).
//
//	go test ./cp/routing -run '^$' -bench Admit1000 -benchmem
func BenchmarkAdmit1000(b *testing.B) {
	routes := make([]*mesh.Route, 1000)
	for i := range routes {
		ns := fmt.Sprint("team", i%7)
		r := rt(ns, fmt.Sprint("r", i), fmt.Sprintf("h%d.acme.test", i/3), fmt.Sprintf("/p%d", i%3), i)
		switch {
		case i%50 == 0:
			r.Host, r.WildcardPolicy = fmt.Sprintf("www.d%d.acme.test", i), mesh.WildcardSubdomain
		case i%5 == 0:
			r.DNSType, r.Host = mesh.DNSTypeSystem, fmt.Sprint("s", i)
		}
		routes[i] = r
	}
	rr := router("r", wildcardsOn)
	b.ReportAllocs()
	for b.Loop() {
		if out := Admit(rr, routes); len(out) != len(routes) {
			b.Fatal(len(out))
		}
	}
}
