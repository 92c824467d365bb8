package dnsserver

import (
	"context"
	"sort"
	"strings"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// The kumavip handler in-process, as CoreDNS calls it: a question in, the answer out through
// a recorder, next standing in for cache and forward. The UDP fast path gives the same
// answers (TestAnswers checks it over a socket).

// wireRecorder is CoreDNS's recorder that also decodes what the handler writes as bytes (it
// writes the packed answer the fast path shares, not a *dns.Msg).
type wireRecorder struct {
	*dnstest.Recorder
	t testing.TB
}

func (r *wireRecorder) Write(b []byte) (int, error) {
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		r.t.Errorf("the handler wrote an answer that does not unpack: %v", err)
	}
	r.Msg, r.Rcode = m, m.Rcode
	return r.Recorder.Write(b)
}

// testHandler is kumavip over testTable with the test search domains; names it does not own
// go to next, which answers example.org. and NXDOMAIN to the rest.
func testHandler(t testing.TB) *handler {
	t.Helper()
	s, err := New(Config{Upstreams: []string{"127.0.0.1:53"},
		ResolvConf: writeResolvConf(t, "nameserver 127.0.0.1\nsearch "+strings.Join(searchDomains, " ")+"\n")})
	if err != nil {
		t.Fatal(err)
	}
	s.Swap(testTable())
	next := test.HandlerFunc(func(_ context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
		m := new(dns.Msg)
		m.SetReply(r)
		if r.Question[0].Name == "example.org." {
			m.Answer = []dns.RR{test.A("example.org. 300 IN A 93.184.216.34")}
		} else {
			m.Rcode = dns.RcodeNameError
		}
		return m.Rcode, w.WriteMsg(m)
	})
	return &handler{s: s, next: next}
}

func serve(t *testing.T, h *handler, m *dns.Msg, tcp bool) *dns.Msg {
	t.Helper()
	rec := &wireRecorder{Recorder: dnstest.NewRecorder(&test.ResponseWriter{TCP: tcp}), t: t}
	if _, err := h.ServeDNS(context.Background(), rec, m); err != nil {
		t.Fatalf("%v: %v", m.Question, err)
	}
	if rec.Msg == nil {
		t.Fatalf("%v: no answer written", m.Question)
	}
	return rec.Msg
}

func TestKumavip(t *testing.T) {
	h := testHandler(t)
	soa := func(owner string) dns.RR {
		return test.SOA(owner + " 30 IN SOA " + owner + " hostmaster." + owner + " 1 3600 600 86400 30")
	}
	rev3 := mustReverse(t, "fd00:fd01::3")
	cases := []test.Case{
		{Qname: "backend.mesh.", Qtype: dns.TypeA, Authoritative: true,
			Answer: []dns.RR{test.A("backend.mesh. 30 IN A 240.0.0.1")}},
		{Qname: "backend.mesh.", Qtype: dns.TypeAAAA, Authoritative: true,
			Answer: []dns.RR{test.AAAA("backend.mesh. 30 IN AAAA fd00:fd01::1")}},
		{Qname: "BackEnd.MESH.", Qtype: dns.TypeA, Authoritative: true, // the question's case echoed
			Answer: []dns.RR{test.A("BackEnd.MESH. 30 IN A 240.0.0.1")}},
		{Qname: "backend.mesh.", Qtype: dns.TypeANY, Authoritative: true,
			Answer: []dns.RR{test.A("backend.mesh. 30 IN A 240.0.0.1"), test.AAAA("backend.mesh. 30 IN AAAA fd00:fd01::1")}},
		{Qname: "web.mesh.", Qtype: dns.TypeAAAA, Authoritative: true, Ns: []dns.RR{soa("web.mesh.")}},       // NODATA, not NXDOMAIN
		{Qname: "v6only.mesh.", Qtype: dns.TypeA, Authoritative: true, Ns: []dns.RR{soa("v6only.mesh.")}},    // the other family
		{Qname: "backend.mesh.", Qtype: dns.TypeMX, Authoritative: true, Ns: []dns.RR{soa("backend.mesh.")}}, // another type
		{Qname: "shared.mesh.", Qtype: dns.TypeA, Authoritative: true, // two entries, one hostname
			Answer: []dns.RR{test.A("shared.mesh. 30 IN A 240.0.0.4")}},
		{Qname: "1.0.0.240.in-addr.arpa.", Qtype: dns.TypePTR, Authoritative: true,
			Answer: []dns.RR{test.PTR("1.0.0.240.in-addr.arpa. 30 IN PTR backend.mesh.")}},
		{Qname: rev3, Qtype: dns.TypePTR, Authoritative: true,
			Answer: []dns.RR{test.PTR(rev3 + " 30 IN PTR v6only.mesh.")}},
		{Qname: "1.0.0.240.in-addr.arpa.", Qtype: dns.TypeA, Authoritative: true, Ns: []dns.RR{soa("1.0.0.240.in-addr.arpa.")}},
		{Qname: "backend.mesh.default.svc.cluster.local.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{
			test.CNAME("backend.mesh.default.svc.cluster.local. 30 IN CNAME backend.mesh."), test.A("backend.mesh. 30 IN A 240.0.0.1")}},
		{Qname: "Web.Mesh.CLUSTER.local.", Qtype: dns.TypeA, Authoritative: true, Answer: []dns.RR{
			test.CNAME("Web.Mesh.CLUSTER.local. 30 IN CNAME web.mesh."), test.A("web.mesh. 30 IN A 240.0.0.2")}},
		{Qname: "web.mesh.cluster.local.", Qtype: dns.TypeAAAA, Authoritative: true, // NODATA of the CNAME's target
			Answer: []dns.RR{test.CNAME("web.mesh.cluster.local. 30 IN CNAME web.mesh.")}, Ns: []dns.RR{soa("web.mesh.")}},
		{Qname: "web.mesh.cluster.local.", Qtype: dns.TypeCNAME, Authoritative: true,
			Answer: []dns.RR{test.CNAME("web.mesh.cluster.local. 30 IN CNAME web.mesh.")}},
		{Qname: "example.org.", Qtype: dns.TypeA, Answer: []dns.RR{test.A("example.org. 300 IN A 93.184.216.34")}}, // next
		{Qname: "down.mesh.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError},                                         // NotAvailable: not ours
		{Qname: "x.backend.mesh.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError},                                    // a subdomain: not ours
		{Qname: "9.0.0.240.in-addr.arpa.", Qtype: dns.TypePTR, Rcode: dns.RcodeNameError},                          // a VIP not allocated
	}
	for _, tcp := range []bool{false, true} {
		for _, tc := range cases {
			m := tc.Msg()
			m.RecursionDesired = true
			r := serve(t, h, m, tcp)
			if err := test.CNAMEOrder(r); err != nil {
				t.Errorf("%s: %v", tc.Qname, err)
			}
			sort.Sort(test.RRSet(tc.Answer)) // SortAndCheck compares sorted sections
			if err := test.SortAndCheck(r, tc); err != nil {
				t.Errorf("%s %s (tcp %v): %v\n%v", tc.Qname, dns.TypeToString[tc.Qtype], tcp, err, r)
				continue
			}
			if r.Authoritative != tc.Authoritative || r.Question[0].Name != tc.Qname || (tc.Authoritative && !r.RecursionAvailable) {
				t.Errorf("%s %s: AA %v RA %v question %q; want AA %v, the question as sent", tc.Qname,
					dns.TypeToString[tc.Qtype], r.Authoritative, r.RecursionAvailable, r.Question[0].Name, tc.Authoritative)
			}
		}
	}
}

// What the handler refuses, truncates or echoes: zone transfers and other opcodes about its
// names, two OPT records, EDNS, an answer too big for the client's buffer.
func TestKumavipEdges(t *testing.T) {
	h := testHandler(t)
	long := longName + ".default.svc.cluster.local."
	axfr := new(dns.Msg)
	axfr.SetAxfr("backend.mesh.")
	notify := new(dns.Msg)
	notify.SetNotify("backend.mesh.")
	twoOPT := new(dns.Msg)
	twoOPT.SetQuestion("backend.mesh.", dns.TypeA)
	twoOPT.Extra = []dns.RR{test.OPT(1232, false), test.OPT(1232, false)}
	do := test.Case{Qname: "backend.mesh.", Qtype: dns.TypeA, Do: true}.Msg()
	cd := test.Case{Qname: "backend.mesh.", Qtype: dns.TypeA, CheckingDisabled: true}.Msg()
	cd.CheckingDisabled = true
	cases := []struct {
		name  string
		m     *dns.Msg
		tcp   bool
		check func(r *dns.Msg) bool
	}{
		{"AXFR of our name: REFUSED", axfr, true, func(r *dns.Msg) bool { return r.Rcode == dns.RcodeRefused }},
		{"NOTIFY about our name: NOTIMP", notify, false, func(r *dns.Msg) bool { return r.Rcode == dns.RcodeNotImplemented }},
		{"two OPT records: FORMERR", twoOPT, false, func(r *dns.Msg) bool { return r.Rcode == dns.RcodeFormatError }},
		{"DO echoed in our OPT", do, false, func(r *dns.Msg) bool {
			o := r.IsEdns0()
			return o != nil && o.Do() && len(r.Answer) == 1
		}},
		{"CD echoed", cd, false, func(r *dns.Msg) bool { return r.CheckingDisabled && len(r.Answer) == 1 }},
		{"over 512 without EDNS: the addresses without the CNAME", question(long, dns.TypeANY), false, func(r *dns.Msg) bool {
			return !r.Truncated && len(r.Answer) == 2 && strings.EqualFold(r.Answer[0].Header().Name, long)
		}},
		{"the same over TCP: whole", question(long, dns.TypeANY), true, func(r *dns.Msg) bool {
			return !r.Truncated && len(r.Answer) == 3
		}},
	}
	for _, tc := range cases {
		if r := serve(t, h, tc.m, tc.tcp); !tc.check(r) {
			t.Errorf("%s: got\n%v", tc.name, r)
		}
	}
}
