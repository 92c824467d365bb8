package authdns

import (
	"fmt"
	"testing"

	"github.com/miekg/dns"
)

// benchCatalog: 10 routers of 3 ready replicas and 1,000 user names over them.
func benchCatalog(b testing.TB) *Catalog {
	in := SyntheticInput(10, 3, 1000)
	cat, problems := Build(in, nil)
	if len(problems) > 0 {
		b.Fatal(problems)
	}
	return cat
}

// BenchmarkAnswer is the cost of one answer, packed as it goes on the wire: a shard's
// wildcard (3 addresses, rotated) and a user name (the CNAME chased to them).
//
//	go test -run '^$' -bench Answer -benchmem ./authdns
func BenchmarkAnswer(b *testing.B) {
	cat := benchCatalog(b)
	for _, q := range []struct{ name, qname string }{
		{"wildcard", "web-shop.shard3.apps.example.com."},
		{"user-cname", "app42.users.test."},
		{"nxdomain", "nope.x.users.test."},
	} {
		b.Run(q.name, func(b *testing.B) {
			req := new(dns.Msg)
			req.SetQuestion(q.qname, dns.TypeA)
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			for b.Loop() {
				m := cat.Answer(req)
				var err error
				if buf, err = m.PackBuffer(buf[:0]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPrepared is the same answers from the prepared form, as the UDP path gives them:
// query packet in, answer packet out.
//
//	go test -run '^$' -bench Prepared -benchmem ./authdns
func BenchmarkPrepared(b *testing.B) {
	cat := benchCatalog(b)
	for _, q := range []struct{ name, qname string }{
		{"wildcard", "web-shop.shard3.apps.example.com."},
		{"user-cname", "app42.users.test."},
		{"nxdomain", "nope.x.users.test."},
	} {
		b.Run(q.name, func(b *testing.B) {
			req := new(dns.Msg)
			req.SetQuestion(q.qname, dns.TypeA)
			p, err := req.Pack()
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			for b.Loop() {
				if _, _, ok := cat.AppendAnswer(buf[:0], p, true); !ok {
					b.Fatal("not answered")
				}
			}
		})
	}
}

// ownDomains: 10 routers of 3 replicas and n user names each on a domain of its own (no
// --dns-user-zone holds them: each is a zone), the shape that made the build quadratic.
func ownDomains(n int) Input {
	in := SyntheticInput(10, 3, 0)
	in.UserZones = nil
	for u := range n {
		in.Users = append(in.Users, UserName{Name: fmt.Sprintf("www.app%d.test", u), Router: fmt.Sprint("shard", u%10)})
	}
	return in
}

// BenchmarkBuildOwnDomains is the build of every zone, at 10,000 and 100,000 user names on
// their own domains: n log n, not n² (8,000 took 4.9 s).
//
//	go test -run '^$' -bench BuildOwnDomains -benchtime 1x ./authdns
func BenchmarkBuildOwnDomains(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			in := ownDomains(n)
			for b.Loop() {
				if cat, problems := Build(in, nil); len(problems) > 0 || len(cat.zones) != n+10 {
					b.Fatalf("%d zones, problems %v", len(cat.zones), problems)
				}
			}
		})
	}
}

// BenchmarkHolds is the check an agent makes for each query it forwards (is the name in a
// zone of the catalog?), at 10,000 and 100,000 zones: as many label lookups as the name has
// labels, whatever the number of zones.
//
//	go test -run '^$' -bench Holds -benchmem ./authdns
func BenchmarkHolds(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		cat, _ := Build(ownDomains(n), nil)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if cat.Holds("www.example.com.") || !cat.Holds("x.www.app42.test.") {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}
