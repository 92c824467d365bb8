package authdns

import (
	"fmt"
	"net/netip"
)

// SyntheticInput is a made-up set of zones of a known shape, the one the benchmarks (this
// package's, the agent's and bench/shardzones) measure: routers shard0..shard<routers-1> at
// shard<r>.apps.example.com, each with replicas ready addresses 10.<r>.0.<i+1>, and a users'
// zone users.test with users names app<u>.users.test dealt over the routers in turn; every
// zone's name server is ns.<zone> at 192.0.2.53.
func SyntheticInput(routers, replicas, users int) Input {
	in := Input{DefaultNSAddr: netip.AddrFrom4([4]byte{192, 0, 2, 53})}
	for r := range routers {
		rt := Router{Name: fmt.Sprint("shard", r), DNS: fmt.Sprintf("shard%d.apps.example.com", r), Revision: 1}
		for i := range replicas {
			rt.Replicas = append(rt.Replicas, Replica{Name: fmt.Sprint("gw", i),
				Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(r), 0, byte(i + 1)})}, Ready: true})
		}
		in.Routers = append(in.Routers, rt)
	}
	in.UserZones = []string{"users.test"}
	for u := range users {
		in.Users = append(in.Users, UserName{Name: fmt.Sprintf("app%d.users.test", u), Router: fmt.Sprint("shard", u%routers)})
	}
	return in
}
