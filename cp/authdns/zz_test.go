package authdns

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

func TestZZProbe(t *testing.T) {
	in := fixture()
	in.Routers = append(in.Routers, Router{Name: "dup", DNS: "shard1.apps.example.com", Revision: 20, Replicas: []Replica{{Name: "gw-z", Addrs: addrs("10.9.9.9"), Ready: true}}})
	in.Routers = append(in.Routers, Router{Name: "child", DNS: "c.shard2.apps.example.com", Revision: 21, Replicas: []Replica{{Name: "gw-y", Addrs: addrs("10.8.8.8"), Ready: true}}})
	in.Users = append(in.Users, UserName{Name: "u.shard1.apps.example.com", Router: "shard2", Revision: 22})
	in.Users = append(in.Users, UserName{Name: "web.acme.test", Router: "nonexistent", Revision: 23})
	cat, problems := Build(in, nil)
	fmt.Println("problems:", problems)
	for _, q := range []string{"x.shard1.apps.example.com", "u.shard1.apps.example.com", "x.c.shard2.apps.example.com", "c.shard2.apps.example.com", "web.acme.test"} {
		m := ask(t, cat, q, dns.TypeA)
		fmt.Println("Q", q, dns.RcodeToString[m.Rcode], m.Answer, m.Ns)
	}
	m := ask(t, cat, "shard2.apps.example.com", dns.TypeNS)
	fmt.Println(m)
}
