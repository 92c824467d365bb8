package authdns

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

// fixture: shard1 with two ready replicas (one dual-stack) and one not ready; shard2 with
// none ready (fail static); the user zone acme.test with a name, a wildcard and a deeper
// name under the wildcard; a user name under no zone (its own zone, flattened).
func fixture() Input {
	return Input{
		Routers: []Router{
			{Name: "shard1", DNS: "shard1.apps.example.com", Revision: 10, Replicas: []Replica{
				{Name: "gw-a", Addrs: addrs("10.0.0.1", "fd00::1"), Ready: true},
				{Name: "gw-b", Addrs: addrs("10.0.0.2"), Ready: true},
				{Name: "gw-c", Addrs: addrs("10.0.0.3"), Ready: false},
			}},
			{Name: "shard2", DNS: "shard2.apps.example.com", TTL: 60, Revision: 11, Replicas: []Replica{
				{Name: "gw-d", Addrs: addrs("10.0.1.1"), Ready: false},
				{Name: "gw-e", Addrs: addrs("10.0.1.2"), Ready: false},
			}},
		},
		UserZones:   []string{"acme.test"},
		Nameservers: []Nameserver{{Name: "ns1.apps.example.com", Addrs: addrs("192.0.2.53")}},
		Users: []UserName{
			{Name: "www.acme.test", Router: "shard1", Revision: 12},
			{Name: "*.acme.test", Router: "shard2", Revision: 13},
			{Name: "a.b.acme.test", Router: "shard2", Revision: 14},
			{Name: "shop.other.test", Router: "shard1", Revision: 15},
		},
	}
}

func ask(t *testing.T, c *Catalog, name string, qtype uint16) *dns.Msg {
	t.Helper()
	req := new(dns.Msg)
	req.SetQuestion(dns.Fqdn(name), qtype)
	return c.Answer(req)
}

func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		f := strings.Fields(rr.String())
		out = append(out, f[0]+" "+f[3]+" "+strings.Join(f[4:], " "))
	}
	slices.Sort(out)
	return out
}

func TestAnswer(t *testing.T) {
	cat, problems := Build(fixture(), nil)
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	const s1 = "shard1.apps.example.com."
	cases := []struct {
		name   string
		qtype  uint16
		rcode  int
		answer []string
		soa    string // zone of the SOA expected in authority ("" = none)
	}{
		// the shard's wildcard: the ready replicas only
		{"web-ns1.shard1.apps.example.com", dns.TypeA, 0, []string{"web-ns1." + s1 + " A 10.0.0.1", "web-ns1." + s1 + " A 10.0.0.2"}, ""},
		{"WEB-ns1.Shard1.apps.example.com", dns.TypeA, 0, []string{"web-ns1." + s1 + " A 10.0.0.1", "web-ns1." + s1 + " A 10.0.0.2"}, ""},
		{"web-ns1.shard1.apps.example.com", dns.TypeAAAA, 0, []string{"web-ns1." + s1 + " AAAA fd00::1"}, ""},
		// a type the name lacks: NODATA with the SOA
		{"web-ns1.shard1.apps.example.com", dns.TypeMX, 0, nil, s1},
		// the apex is not covered by its own wildcard (RFC 4592): NODATA for A
		{s1, dns.TypeA, 0, nil, s1},
		{s1, dns.TypeSOA, 0, []string{s1 + " SOA ns1.apps.example.com. hostmaster." + s1 + " 10 300 60 1209600 30"}, ""},
		{s1, dns.TypeNS, 0, []string{s1 + " NS ns1.apps.example.com."}, ""},
		// deeper names under the wildcard are synthesized too (the closest encloser is the apex)
		{"a.b.shard1.apps.example.com", dns.TypeA, 0, []string{"a.b." + s1 + " A 10.0.0.1", "a.b." + s1 + " A 10.0.0.2"}, ""},
		// the router's canonical name is answered by the wildcard
		{"router-shard1.shard1.apps.example.com", dns.TypeA, 0, []string{"router-shard1." + s1 + " A 10.0.0.1", "router-shard1." + s1 + " A 10.0.0.2"}, ""},
		// no replica ready: all of them (fail static)
		{"x.shard2.apps.example.com", dns.TypeA, 0, []string{"x.shard2.apps.example.com. A 10.0.1.1", "x.shard2.apps.example.com. A 10.0.1.2"}, ""},
		// a user name: one CNAME to the canonical name, chased in the same answer
		{"www.acme.test", dns.TypeA, 0, []string{"router-shard1." + s1 + " A 10.0.0.1", "router-shard1." + s1 + " A 10.0.0.2", "www.acme.test. CNAME router-shard1." + s1}, ""},
		{"www.acme.test", dns.TypeCNAME, 0, []string{"www.acme.test. CNAME router-shard1." + s1}, ""},
		// chased to a name that lacks the type: CNAME then NODATA with the target zone's SOA
		{"www.acme.test", dns.TypeTXT, 0, []string{"www.acme.test. CNAME router-shard1." + s1}, s1},
		// the user wildcard answers names that do not exist...
		{"shop.acme.test", dns.TypeA, 0, []string{"router-shard2.shard2.apps.example.com. A 10.0.1.1", "router-shard2.shard2.apps.example.com. A 10.0.1.2", "shop.acme.test. CNAME router-shard2.shard2.apps.example.com."}, ""},
		// ...but never a name that exists below it (an empty non-terminal: CoreDNS issue 5078)
		{"b.acme.test", dns.TypeA, 0, nil, "acme.test."},
		// nor the apex
		{"acme.test", dns.TypeA, 0, nil, "acme.test."},
		// below an existing name, the wildcard of the closest encloser does not exist: NXDOMAIN
		{"x.www.acme.test", dns.TypeA, dns.RcodeNameError, nil, "acme.test."},
		{"nope.b.acme.test", dns.TypeA, dns.RcodeNameError, nil, "acme.test."},
		// a user name under no zone is its own zone; its apex holds the addresses (no CNAME)
		{"shop.other.test", dns.TypeA, 0, []string{"shop.other.test. A 10.0.0.1", "shop.other.test. A 10.0.0.2"}, ""},
		{"x.shop.other.test", dns.TypeA, dns.RcodeNameError, nil, "shop.other.test."},
		// outside every zone: REFUSED, not authoritative
		{"example.org", dns.TypeA, dns.RcodeRefused, nil, ""},
		{"apps.example.com", dns.TypeA, dns.RcodeRefused, nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name+"/"+dns.TypeToString[tc.qtype], func(t *testing.T) {
			m := ask(t, cat, tc.name, tc.qtype)
			if m.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s\n%v", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode], m)
			}
			if got := rrStrings(m.Answer); !slices.Equal(got, tc.answer) {
				t.Fatalf("answer\n%q\nwant\n%q", got, tc.answer)
			}
			if m.Authoritative != (tc.rcode != dns.RcodeRefused) {
				t.Errorf("AA %v", m.Authoritative)
			}
			switch {
			case tc.soa == "" && len(m.Ns) > 0:
				t.Errorf("authority %v, want none", m.Ns)
			case tc.soa != "":
				if len(m.Ns) != 1 || m.Ns[0].Header().Rrtype != dns.TypeSOA || m.Ns[0].Header().Name != tc.soa {
					t.Fatalf("authority %v, want the SOA of %s", m.Ns, tc.soa)
				}
				soa := m.Ns[0].(*dns.SOA)
				if soa.Hdr.Ttl != min(soa.Minttl, cat.Zone(tc.soa).TTL) {
					t.Errorf("negative TTL %d, want min(TTL, minimum)", soa.Hdr.Ttl)
				}
			}
		})
	}
}

func TestRotationCoversEveryOrder(t *testing.T) {
	in := fixture()
	in.Routers[0].Replicas[2].Ready = true // three IPv4 addresses
	cat, _ := Build(in, nil)
	orders := map[string]int{}
	for range 30 {
		m := ask(t, cat, "x.shard1.apps.example.com", dns.TypeA)
		var order []string
		for _, rr := range m.Answer {
			order = append(order, rr.(*dns.A).A.String())
		}
		if len(order) != 3 {
			t.Fatalf("incomplete set %v", order)
		}
		orders[strings.Join(order, ",")]++
	}
	if len(orders) != 3 {
		t.Fatalf("rotations seen %v, want every starting address", orders)
	}
}

func TestReadinessChangesTheSet(t *testing.T) {
	in := fixture()
	cat, _ := Build(in, nil)
	if got := len(ask(t, cat, "x.shard1.apps.example.com", dns.TypeA).Answer); got != 2 {
		t.Fatalf("%d addresses, want 2 ready", got)
	}
	in.Routers[0].Replicas[1].Ready = false
	cat, _ = Build(in, nil)
	m := ask(t, cat, "x.shard1.apps.example.com", dns.TypeA)
	if got := rrStrings(m.Answer); !slices.Equal(got, []string{"x.shard1.apps.example.com. A 10.0.0.1"}) {
		t.Fatalf("a replica gone not-ready is still answered: %v", got)
	}
}

func TestOneCNAMEPerName(t *testing.T) {
	in := fixture()
	in.Users = append(in.Users, UserName{Name: "www.acme.test", Router: "shard2"})
	cat, problems := Build(in, nil)
	if len(problems) != 1 || problems[0].Name != "www.acme.test" || !strings.Contains(problems[0].Message, "one name leads to one router") {
		t.Fatalf("problems %v, want one naming www.acme.test", problems)
	}
	m := ask(t, cat, "www.acme.test", dns.TypeCNAME)
	if len(m.Answer) != 1 {
		t.Fatalf("%d CNAMEs for one name", len(m.Answer))
	}
}

func TestBadInputIsNamed(t *testing.T) {
	in := fixture()
	in.Routers = append(in.Routers,
		Router{Name: "dup", DNS: "shard1.apps.example.com"},
		Router{Name: "bad", DNS: "bad..name"})
	in.Users = append(in.Users, UserName{Name: "x.acme.test", Router: "ghost"},
		UserName{Name: "router-shard1.shard1.apps.example.com", Router: "shard1"})
	_, problems := Build(in, nil)
	var got []string
	for _, p := range problems {
		got = append(got, p.Error())
	}
	want := []string{`dup: router dns "shard1.apps.example.com" is already the zone of router "shard1"`, `bad: router dns "bad..name" is not a domain name`, `router-shard1.shard1.apps.example.com: is the canonical name of router "shard1" itself`, `x.acme.test: router "ghost" is unknown`}
	if len(got) != len(want) {
		t.Fatalf("problems %q", got)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %q, want %q...", got[i], want[i])
		}
	}
}

func TestCNAMELoopIsCaught(t *testing.T) {
	z := &Zone{Origin: "loop.test.", TTL: 30, nodes: map[string]*node{}}
	z.SOA = &dns.SOA{Hdr: dns.RR_Header{Name: z.Origin, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 30}, Ns: "ns.loop.test.", Mbox: "h.loop.test.", Minttl: 30}
	z.add(z.SOA)
	for _, p := range [][2]string{{"a.loop.test.", "b.loop.test."}, {"b.loop.test.", "a.loop.test."}} {
		z.add(&dns.CNAME{Hdr: dns.RR_Header{Name: p[0], Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 30}, Target: p[1]})
	}
	cat := &Catalog{zones: map[string]*Zone{z.Origin: z}}
	m := ask(t, cat, "a.loop.test", dns.TypeA)
	if len(m.Answer) != 2 {
		t.Fatalf("loop answer %v, want the two CNAMEs once each", m.Answer)
	}
}

func TestSerial(t *testing.T) {
	s := NewSerials()
	in := fixture()
	cat, _ := Build(in, s)
	first := cat.Zone("shard1.apps.example.com").Serial()
	if first != 10 {
		t.Fatalf("serial %d, want the zone's revision 10", first)
	}
	// same content, a later revision (something elsewhere changed): serial unchanged
	in.Routers[0].Revision = 20
	cat, _ = Build(in, s)
	if got := cat.Zone("shard1.apps.example.com").Serial(); got != first {
		t.Fatalf("serial moved to %d without a content change", got)
	}
	// content changes at revision 21: serial 21
	in.Routers[0].Revision = 21
	in.Routers[0].Replicas[1].Ready = false
	cat, _ = Build(in, s)
	if got := cat.Zone("shard1.apps.example.com").Serial(); got != 21 {
		t.Fatalf("serial %d after a change at revision 21", got)
	}
	// a change whose revision is not ahead (an input deleted, the newest left is older):
	// the serial still moves forward, never back
	in.Routers[0].Revision = 5
	in.Routers[0].Replicas[1].Ready = true
	cat, _ = Build(in, s)
	if got := cat.Zone("shard1.apps.example.com").Serial(); got != 22 {
		t.Fatalf("serial %d, want 22 (never back)", got)
	}
	// another replica following the same store from scratch gives the same serial for the
	// same content at the same revision
	in.Routers[0].Revision = 21
	in.Routers[0].Replicas[1].Ready = false
	other, _ := Build(in, NewSerials())
	if got := other.Zone("shard1.apps.example.com").Serial(); got != 21 {
		t.Fatalf("another replica's serial %d, want 21", got)
	}
	if !SerialAfter(1, 0xffffffff) || SerialAfter(0xffffffff, 1) {
		t.Fatal("RFC 1982 wrap-around")
	}
}

// A user route on ns.<zone> of a zone of its own keeps its name: the zone's own name server
// is then ns1.<zone> - the default glue used to take the name (answering the server's
// address, the route's CNAME refused). Without any name server address the glue 127.0.0.1
// is reported, not given silently.
func TestDefaultNameserverTakesNoUserName(t *testing.T) {
	in := Input{
		Routers:       []Router{{Name: "shard1", DNS: "shard1.apps.example.com", Replicas: []Replica{{Name: "gw", Addrs: addrs("10.0.0.1"), Ready: true}}}},
		Users:         []UserName{{Name: "abc.example.org", Router: "shard1"}, {Name: "ns.abc.example.org", Router: "shard1"}},
		DefaultNSAddr: netip.MustParseAddr("192.0.2.53"),
	}
	cat, problems := Build(in, nil)
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	m := ask(t, cat, "ns.abc.example.org", dns.TypeA)
	if len(m.Answer) == 0 || m.Answer[0].Header().Rrtype != dns.TypeCNAME {
		t.Fatalf("the user's ns.abc.example.org answers %v, want its CNAME to the router", m.Answer)
	}
	ns := ask(t, cat, "abc.example.org", dns.TypeNS)
	if got := rrStrings(ns.Answer); len(got) != 1 || got[0] != "abc.example.org. NS ns1.abc.example.org." {
		t.Fatalf("NS %v, want ns1.abc.example.org.", got)
	}
	if got := rrStrings(ns.Extra); len(got) != 1 || got[0] != "ns1.abc.example.org. A 192.0.2.53" {
		t.Fatalf("glue %v", got)
	}

	in.DefaultNSAddr = netip.MustParseAddr("0.0.0.0")
	if _, problems := Build(in, nil); len(problems) != 1 || !strings.Contains(problems[0].Error(), "127.0.0.1") {
		t.Fatalf("an unspecified server address: problems %v, want the loopback glue reported", problems)
	}
}
