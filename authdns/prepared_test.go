package authdns

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// sections renders a response for comparison: header flags, rcode and each section's
// records sorted (the address sets rotate).
func sections(m *dns.Msg) string {
	set := func(rrs []dns.RR) string {
		var s []string
		for _, rr := range rrs {
			s = append(s, rr.String())
		}
		slices.Sort(s)
		return strings.Join(s, "\n")
	}
	return fmt.Sprintf("id=%d qr=%v aa=%v tc=%v rd=%v ra=%v cd=%v rcode=%s q=%v\nAN:\n%s\nNS:\n%s\nAR:\n%s", m.Id, m.Response, m.Authoritative,
		m.Truncated, m.RecursionDesired, m.RecursionAvailable, m.CheckingDisabled, dns.RcodeToString[m.Rcode], m.Question,
		set(m.Answer), set(m.Ns), set(m.Extra))
}

// The prepared answers are the reference engine's (Catalog.Reply) for every name and type the
// fixture has: exact names, wildcards, empty non-terminals, CNAME chains, NXDOMAIN, NODATA,
// outside names, mixed case, with and without EDNS; what it does not take (ANY, other
// classes, truncation) it leaves to Reply.
func TestPreparedAnswersAsReply(t *testing.T) {
	checkPreparedAsReply(t, preparedFixture(t))
}

func preparedFixture(t *testing.T) *Catalog {
	in := fixture()
	in.Users = append(in.Users, UserName{Name: "loop.acme.test", Router: "shard1"})
	cat, problems := Build(in, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return cat
}

func checkPreparedAsReply(t *testing.T, cat *Catalog) {
	t.Helper()
	names := []string{"web.shard1.apps.example.com", "Web.SHARD1.apps.example.com", "shard1.apps.example.com",
		"router-shard1.shard1.apps.example.com", "a.b.shard1.apps.example.com", "ns1.apps.example.com", "www.acme.test",
		"WWW.Acme.Test", "x.acme.test", "a.b.acme.test", "b.acme.test", "c.a.b.acme.test", "acme.test", "shop.other.test",
		"nope.other.test", "other.test", "example.org", "x.shard2.apps.example.com", "apps.example.com"}
	types := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeCNAME, dns.TypeSOA, dns.TypeNS, dns.TypeTXT, dns.TypeMX, dns.TypeANY}
	taken := 0
	for _, name := range names {
		for _, qt := range types {
			for _, edns := range []bool{false, true} {
				req := new(dns.Msg)
				req.SetQuestion(dns.Fqdn(name), qt)
				req.Id, req.CheckingDisabled = 4242, true
				if edns {
					req.SetEdns0(4096, false)
				}
				p, err := req.Pack()
				if err != nil {
					t.Fatal(err)
				}
				out, rcode, ok := cat.AppendAnswer(make([]byte, 0, 512), p, true)
				if !ok {
					if qt != dns.TypeANY {
						t.Errorf("%s %s edns=%v: not answered by the prepared form", name, dns.TypeToString[qt], edns)
					}
					continue
				}
				taken++
				got := new(dns.Msg)
				if err := got.Unpack(out); err != nil {
					t.Fatalf("%s %s: the prepared answer does not unpack: %v", name, dns.TypeToString[qt], err)
				}
				want := cat.Reply(req, false)
				if sections(got) != sections(want) || rcode != want.Rcode {
					t.Errorf("%s %s edns=%v: prepared\n%s\nreference\n%s", name, dns.TypeToString[qt], edns, sections(got), sections(want))
				}
			}
		}
	}
	if taken < len(names)*(len(types)-1)*2 {
		t.Errorf("only %d queries answered by the prepared form", taken)
	}
	// malformed or unusual queries are left to Reply
	req := new(dns.Msg)
	req.SetQuestion("www.acme.test.", dns.TypeA)
	req.Question[0].Qclass = dns.ClassCHAOS
	p, _ := req.Pack()
	if _, _, ok := cat.AppendAnswer(nil, p, true); ok {
		t.Error("a CHAOS query answered by the prepared form")
	}
	req.Question[0].Qclass = dns.ClassINET
	p, _ = req.Pack()
	for cut := range len(p) - 1 {
		if _, _, ok := cat.AppendAnswer(nil, p[:cut], true); ok {
			t.Errorf("a query cut at %d bytes answered", cut)
		}
	}
}

// An answer larger than the client's UDP size is left to Reply, which truncates it.
func TestPreparedLeavesTruncationToReply(t *testing.T) {
	in := Input{Routers: []Router{{Name: "big", DNS: "big.test"}}}
	for i := range 60 {
		in.Routers[0].Replicas = append(in.Routers[0].Replicas, Replica{Name: fmt.Sprint(i), Addrs: addrs(fmt.Sprintf("fd00::%x", i+1)), Ready: true})
	}
	cat, _ := Build(in, nil)
	req := new(dns.Msg)
	req.SetQuestion("x.big.test.", dns.TypeAAAA)
	p, _ := req.Pack()
	if _, _, ok := cat.AppendAnswer(nil, p, true); ok {
		t.Fatal("a 1.7 kB answer given over UDP to a 512-byte client")
	}
	if out, _, ok := cat.AppendAnswer(nil, p, false); !ok || len(out) < 1500 {
		t.Fatal("over TCP the whole answer is given")
	}
}

// Rotation by index: every order of a 3-address set appears, each answer complete; and an
// answer allocates nothing.
func TestPreparedRotatesWithoutAllocating(t *testing.T) {
	cat := benchCatalog(t)
	req := new(dns.Msg)
	req.SetQuestion("web.shard3.apps.example.com.", dns.TypeA)
	p, _ := req.Pack()
	buf := make([]byte, 0, 512)
	firsts := map[string]bool{}
	for range 30 {
		out, _, ok := cat.AppendAnswer(buf[:0], p, true)
		m := new(dns.Msg)
		if !ok || m.Unpack(out) != nil || len(m.Answer) != 3 {
			t.Fatalf("answer %v", m)
		}
		firsts[m.Answer[0].(*dns.A).A.String()] = true
	}
	if len(firsts) != 3 {
		t.Fatalf("first addresses seen: %v", firsts)
	}
	for _, q := range []string{"web.shard3.apps.example.com.", "app42.users.test.", "nope.x.users.test."} {
		req.SetQuestion(q, dns.TypeA)
		p, _ := req.Pack()
		if n := testing.AllocsPerRun(100, func() { cat.AppendAnswer(buf[:0], p, true) }); n != 0 {
			t.Errorf("%s: %v allocations per answer", q, n)
		}
	}
}

// A zone kept into a new catalog (Serials.Build keeps a zone whose serial is held; the
// agent swaps unchanged zones in again) is served from the prepared form it has, not
// prepared again.
func TestKeptZoneIsNotPreparedAgain(t *testing.T) {
	zones := preparedFixture(t).Zones()
	before := map[string]*wireZone{}
	for _, z := range zones {
		before[z.Origin] = z.wire
	}
	again := NewCatalog(zones...)
	for _, z := range zones {
		if w := before[z.Origin]; w == nil || again.wire[wireName(z.Origin)] != w {
			t.Errorf("zone %s prepared again in the new catalog, not taken as it was", z.Origin)
		}
	}
	checkPreparedAsReply(t, again)
}

// Preparing a zone leaves its records as they are: the records are the zone's wherever it
// is served, and a zone transfer reads them. The records' Rdlength, which dns.PackRR
// writes, is the field to watch.
func TestPrepareWritesNoRecord(t *testing.T) {
	zones := preparedFixture(t).Zones()
	var recs []dns.RR
	for _, z := range zones {
		recs = append(recs, z.Records()...)
	}
	for _, rr := range recs {
		rr.Header().Rdlength = 0
	}
	for _, z := range zones {
		z.prepare()
	}
	for _, rr := range recs {
		if rr.Header().Rdlength != 0 {
			t.Fatalf("preparing the zone wrote %v's Rdlength (%d)", rr, rr.Header().Rdlength)
		}
	}
	if len(recs) < 10 {
		t.Fatalf("the fixture has %d records: too few to tell", len(recs))
	}
}
