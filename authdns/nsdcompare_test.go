package authdns

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/internal/nsdtest"
)

// compareInput is a catalog with every edge an authoritative answer has: zone apexes with
// SOA and NS (glue inside the zone, none outside), shard wildcards, user CNAMEs into shard
// zones and out of every zone, a user wildcard, a name below an existing name, empty
// non-terminals, a chain of CNAMEs across zones, a zone of its own for a user name.
func compareInput() Input {
	in := fixture()
	in.Nameservers = []Nameserver{
		{Name: "ns1.apps.example.com", Addrs: addrs("192.0.2.53", "2001:db8::53")},
		{Name: "ns2.acme.test", Addrs: addrs("192.0.2.54")},
	}
	in.Users = append(in.Users,
		UserName{Name: "deep.x.y.acme.test", Router: "shard1", Revision: 16},
		UserName{Name: "api.shop.other.test", Router: "shard2", Revision: 17},
	)
	return in
}

// questions are the questions asked of both servers: every name of interest (apexes, glue,
// wildcard-answered names one and two labels down, names below existing names, empty
// non-terminals, CNAMEs, names outside every zone) with every type, in mixed case, half of
// them with EDNS (and DO).
func questions() []*dns.Msg {
	names := []string{
		"shard1.apps.example.com", "x.shard1.apps.example.com", "a.b.shard1.apps.example.com",
		"router-shard1.shard1.apps.example.com", "*.shard1.apps.example.com",
		"shard2.apps.example.com", "y.shard2.apps.example.com",
		"acme.test", "www.acme.test", "other.acme.test", "b.acme.test", "a.b.acme.test",
		"z.a.b.acme.test", "y.acme.test", "x.y.acme.test", "deep.x.y.acme.test", "ns2.acme.test",
		"shop.other.test", "api.shop.other.test", "nope.shop.other.test", "ns1.apps.example.com",
		"apps.example.com", "example.org", "Www.ACME.test",
	}
	types := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeNS, dns.TypeSOA, dns.TypeCNAME, dns.TypeTXT, dns.TypeMX, dns.TypePTR}
	var qs []*dns.Msg
	for i, n := range names {
		for j, t := range types {
			q := new(dns.Msg)
			q.SetQuestion(dns.Fqdn(n), t)
			q.RecursionDesired = (i+j)%3 == 0
			if (i+j)%2 == 0 {
				q.SetEdns0(1232, (i+j)%4 == 0)
			}
			qs = append(qs, q)
		}
	}
	// type ANY (at a CNAME too) and class ANY
	for _, n := range []string{"shard1.apps.example.com", "x.shard1.apps.example.com", "www.acme.test", "a.b.acme.test", "nope.shop.other.test"} {
		q := new(dns.Msg)
		q.SetQuestion(dns.Fqdn(n), dns.TypeANY)
		qs = append(qs, q)
		q = new(dns.Msg)
		q.SetQuestion(dns.Fqdn(n), dns.TypeA)
		q.Question[0].Qclass = dns.ClassANY
		qs = append(qs, q)
	}
	return qs
}

// canonical is a response as text, its sets sorted (rotation and server order aside), the
// ID and the OPT's advertised size aside.
func canonical(r *dns.Msg) string {
	sect := func(rrs []dns.RR) string {
		var out []string
		for _, rr := range rrs {
			if opt, ok := rr.(*dns.OPT); ok {
				out = append(out, fmt.Sprintf("OPT do=%v", opt.Do()))
				continue
			}
			out = append(out, strings.ToLower(rr.String()))
		}
		slices.Sort(out)
		return strings.Join(out, "\n  ")
	}
	return fmt.Sprintf("%s aa=%v tc=%v rd=%v ra=%v\nanswer:\n  %s\nauthority:\n  %s\nadditional:\n  %s",
		dns.RcodeToString[r.Rcode], r.Authoritative, r.Truncated, r.RecursionDesired, r.RecursionAvailable,
		sect(r.Answer), sect(r.Ns), sect(r.Extra))
}

// TestAnswersAsNSD serves the exported zones (WriteZone) with a real nsd beside this server
// and asks both the same 200 questions: every answer - rcode, flags, the three sections,
// serials and TTLs - is the same (an answer to type ANY holds nsd's set, RFC 8482: nsd gives
// one set, this server all of them). nsd runs with minimal-responses, as this server
// answers: no NS set in the authority section of a positive answer.
func TestAnswersAsNSD(t *testing.T) {
	cat, problems := Build(compareInput(), nil)
	if len(problems) > 0 {
		t.Fatalf("problems: %v", problems)
	}
	var zones []nsdtest.Zone
	for _, z := range cat.Zones() {
		var b bytes.Buffer
		if err := WriteZone(&b, z); err != nil {
			t.Fatal(err)
		}
		zones = append(zones, nsdtest.Zone{Origin: z.Origin, File: b.String()})
	}
	nsd := nsdtest.Start(t, nsdtest.Config{Zones: zones, Minimal: true})
	s := startServer(t, Config{}, cat)
	udp, _ := s.Addrs()
	qs := questions()
	if len(qs) < 190 {
		t.Fatalf("%d questions, want about 200", len(qs))
	}
	c := &dns.Client{Timeout: 2 * time.Second}
	differ := 0
	for _, q := range qs {
		want, _, err := c.Exchange(q.Copy(), nsd)
		if err != nil {
			t.Fatalf("nsd: %s: %v", q.Question[0].String(), err)
		}
		got, _, err := c.Exchange(q.Copy(), udp.String())
		if err != nil {
			t.Fatalf("kuma-cp: %s: %v", q.Question[0].String(), err)
		}
		if q.Question[0].Qtype == dns.TypeANY && len(want.Answer) > 0 && want.Answer[0].Header().Rrtype != dns.TypeCNAME {
			// RFC 8482: nsd answers ANY with one of the sets, this server with all of
			// them; the same otherwise
			extra := slices.DeleteFunc(slices.Clone(got.Answer), func(rr dns.RR) bool {
				return !slices.ContainsFunc(want.Answer, func(w dns.RR) bool { return dns.IsDuplicate(w, rr) })
			})
			got.Answer = extra
		}
		if w, g := canonical(want), canonical(got); w != g {
			differ++
			t.Errorf("%s (edns %v):\nnsd:\n%s\nours:\n%s", q.Question[0].String(), q.IsEdns0() != nil, w, g)
		}
	}
	if differ > 0 {
		t.Logf("%d of %d answers differ", differ, len(qs))
	}
}
