package authdns

import (
	"testing"

	"github.com/miekg/dns"
)

// FuzzAppendAnswer: any packet from the network. The prepared form never panics, never
// answers what does not parse as a query, and what it answers unpacks and is the reference
// engine's answer to the same query (sections, glue and DO included).
//
//	go test -run '^$' -fuzz FuzzAppendAnswer -fuzztime 30s ./authdns
func FuzzAppendAnswer(f *testing.F) {
	cat, problems := Build(fixture(), nil)
	if len(problems) > 0 {
		f.Fatal(problems)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
		edns  bool
	}{
		{"web.shard1.apps.example.com.", dns.TypeA, false}, {"www.acme.test.", dns.TypeAAAA, true},
		{"c.a.b.acme.test.", dns.TypeA, false}, {"nope.other.test.", dns.TypeMX, true}, {"example.org.", dns.TypeA, false},
		{"shard1.apps.example.com.", dns.TypeNS, true}, {"acme.test.", dns.TypeNS, false},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		if q.edns {
			m.SetEdns0(1232, true)
		}
		p, _ := m.Pack()
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		out, _, ok := cat.AppendAnswer(nil, p, true)
		if !ok {
			return
		}
		req := new(dns.Msg)
		if err := req.Unpack(p); err != nil {
			t.Fatalf("answered a packet that does not unpack (%v): %x", err, p)
		}
		got := new(dns.Msg)
		if err := got.Unpack(out); err != nil {
			t.Fatalf("the answer does not unpack (%v): query %x", err, p)
		}
		if len(out) > ednsSize {
			t.Fatalf("a %d-byte answer over UDP", len(out))
		}
		want := cat.Reply(req, false)
		gotDO, wantDO := got.IsEdns0() != nil && got.IsEdns0().Do(), want.IsEdns0() != nil && want.IsEdns0().Do()
		if got.Rcode != want.Rcode || len(got.Answer) != len(want.Answer) || len(got.Ns) != len(want.Ns) ||
			len(got.Extra) != len(want.Extra) || gotDO != wantDO || got.Authoritative != want.Authoritative {
			t.Fatalf("query %v: prepared\n%v\nreference\n%v", req.Question, got, want)
		}
	})
}
