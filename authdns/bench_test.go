package authdns

import (
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
