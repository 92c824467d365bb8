package dnsserver

import (
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
	"github.com/miekg/dns"
)

// rrStrings renders a section on one line per record, with the TTL (part of the
// contract for local answers) or without it (upstream answers: the cache counts it down).
func rrStrings(rrs []dns.RR, ttl bool) []string {
	var out []string
	for _, r := range rrs {
		f := strings.Fields(r.String())
		if !ttl {
			f = append(f[:1], f[2:]...)
		}
		out = append(out, strings.Join(f, " "))
	}
	return out
}

func TestAnswers(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	cases := []struct {
		name   string
		qname  string
		qtype  uint16
		rcode  int
		aa     bool
		answer []string
		soa    bool // NODATA: an SOA in authority
		// soaOwner: the SOA's owner when not qname (a NODATA after a CNAME is the target's)
		soaOwner string
	}{
		{name: "A", qname: "backend.mesh.", qtype: dns.TypeA, aa: true,
			answer: []string{"backend.mesh. 30 IN A 240.0.0.1"}},
		{name: "AAAA", qname: "backend.mesh.", qtype: dns.TypeAAAA, aa: true,
			answer: []string{"backend.mesh. 30 IN AAAA fd00:fd01::1"}},
		{name: "mixed case echoes the question's case", qname: "BackEnd.MESH.", qtype: dns.TypeA, aa: true,
			answer: []string{"BackEnd.MESH. 30 IN A 240.0.0.1"}},
		{name: "ANY gives both families", qname: "backend.mesh.", qtype: dns.TypeANY, aa: true,
			answer: []string{"backend.mesh. 30 IN A 240.0.0.1", "backend.mesh. 30 IN AAAA fd00:fd01::1"}},
		{name: "AAAA of an IPv4-only name is NODATA, not NXDOMAIN", qname: "web.mesh.", qtype: dns.TypeAAAA, aa: true, soa: true},
		{name: "A of an IPv6-only name is NODATA", qname: "v6only.mesh.", qtype: dns.TypeA, aa: true, soa: true},
		{name: "MX of an owned name is NODATA", qname: "backend.mesh.", qtype: dns.TypeMX, aa: true, soa: true},
		{name: "TXT of an owned name is NODATA", qname: "backend.mesh.", qtype: dns.TypeTXT, aa: true, soa: true},
		{name: "hostname shared by two entries", qname: "shared.mesh.", qtype: dns.TypeA, aa: true,
			answer: []string{"shared.mesh. 30 IN A 240.0.0.4"}},
		{name: "PTR IPv4", qname: "1.0.0.240.in-addr.arpa.", qtype: dns.TypePTR, aa: true,
			answer: []string{"1.0.0.240.in-addr.arpa. 30 IN PTR backend.mesh."}},
		{name: "PTR IPv6", qname: mustReverse(t, "fd00:fd01::3"), qtype: dns.TypePTR, aa: true,
			answer: []string{mustReverse(t, "fd00:fd01::3") + " 30 IN PTR v6only.mesh."}},
		{name: "PTR name asked A is NODATA", qname: "1.0.0.240.in-addr.arpa.", qtype: dns.TypeA, aa: true, soa: true},
		{name: "first search domain: CNAME + A", qname: "backend.mesh.default.svc.cluster.local.", qtype: dns.TypeA, aa: true,
			answer: []string{"backend.mesh.default.svc.cluster.local. 30 IN CNAME backend.mesh.", "backend.mesh. 30 IN A 240.0.0.1"}},
		{name: "second search domain", qname: "backend.mesh.svc.cluster.local.", qtype: dns.TypeAAAA, aa: true,
			answer: []string{"backend.mesh.svc.cluster.local. 30 IN CNAME backend.mesh.", "backend.mesh. 30 IN AAAA fd00:fd01::1"}},
		{name: "third search domain, mixed case", qname: "Web.Mesh.CLUSTER.local.", qtype: dns.TypeA, aa: true,
			answer: []string{"Web.Mesh.CLUSTER.local. 30 IN CNAME web.mesh.", "web.mesh. 30 IN A 240.0.0.2"}},
		{name: "search domain, family missing: CNAME + NODATA of the target", qname: "web.mesh.cluster.local.", qtype: dns.TypeAAAA, aa: true,
			answer: []string{"web.mesh.cluster.local. 30 IN CNAME web.mesh."}, soa: true, soaOwner: "web.mesh."},
		{name: "search domain, type missing: CNAME + NODATA of the target", qname: "Backend.Mesh.svc.cluster.local.", qtype: dns.TypeTXT, aa: true,
			answer: []string{"Backend.Mesh.svc.cluster.local. 30 IN CNAME backend.mesh."}, soa: true, soaOwner: "backend.mesh."},
		{name: "search domain asked CNAME", qname: "web.mesh.cluster.local.", qtype: dns.TypeCNAME, aa: true,
			answer: []string{"web.mesh.cluster.local. 30 IN CNAME web.mesh."}},
		{name: "other names go upstream", qname: "example.org.", qtype: dns.TypeA,
			answer: []string{"example.org. IN A 93.184.216.34"}},
		{name: "upstream NXDOMAIN passes through", qname: "nope.example.org.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "a NotAvailable hostname is not ours", qname: "down.mesh.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "a subdomain of an owned name is not ours", qname: "x.backend.mesh.", qtype: dns.TypeA, rcode: dns.RcodeNameError},
		{name: "a VIP-like address we did not allocate is not ours", qname: "9.0.0.240.in-addr.arpa.", qtype: dns.TypePTR, rcode: dns.RcodeNameError},
	}
	// udp: the fast path, every case (the kumavip handler gives the same answers in-process:
	// TestKumavip); tcp: the handler in CoreDNS's chain, the cases that go upstream.
	for _, mode := range []string{"udp", "tcp"} {
		for _, tc := range cases {
			if mode == "tcp" && tc.aa {
				continue
			}
			t.Run(mode+"/"+tc.name, func(t *testing.T) {
				r := ts.exchange(t, mode, question(tc.qname, tc.qtype))
				if r.Rcode != tc.rcode {
					t.Fatalf("rcode %s, want %s\n%v", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode], r)
				}
				if r.Authoritative != tc.aa {
					t.Errorf("AA %v, want %v", r.Authoritative, tc.aa)
				}
				if got := rrStrings(r.Answer, tc.aa); !slices.Equal(got, tc.answer) {
					t.Errorf("answer:\n got %q\nwant %q", got, tc.answer)
				}
				if tc.aa && (!r.RecursionAvailable || !r.RecursionDesired) {
					t.Errorf("RD/RA not set: %v", r.MsgHdr)
				}
				if r.Question[0].Name != tc.qname {
					t.Errorf("question %q, want %q as sent", r.Question[0].Name, tc.qname)
				}
				owner := tc.qname
				if tc.soaOwner != "" {
					owner = tc.soaOwner
				}
				hasSOA := len(r.Ns) == 1 && slices.Equal(rrStrings(r.Ns, true)[0:1], []string{
					owner + " 30 IN SOA " + owner + " hostmaster." + owner + " " +
						strings.Fields(r.Ns[0].String())[6] + " 3600 600 86400 30"})
				if hasSOA != tc.soa && tc.aa {
					t.Errorf("authority %v, want SOA: %v", r.Ns, tc.soa)
				}
			})
		}
	}
}

func mustReverse(t *testing.T, ip string) string {
	r, err := dns.ReverseAddr(ip)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestEDNS(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())

	t.Run("OPT echoed with DO", func(t *testing.T) {
		q := question("backend.mesh.", dns.TypeA)
		q.SetEdns0(1232, true)
		r := ts.exchange(t, "udp", q)
		o := r.IsEdns0()
		if o == nil || !o.Do() || o.Version() != 0 || len(r.Answer) != 1 {
			t.Fatalf("want OPT with DO and one answer, got %v", r)
		}
	})
	t.Run("OPT with options (cookie) answered", func(t *testing.T) {
		q := question("backend.mesh.", dns.TypeA)
		q.SetEdns0(1232, false)
		q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
		r := ts.exchange(t, "udp", q)
		if len(r.Answer) != 1 || r.IsEdns0() == nil {
			t.Fatalf("got %v", r)
		}
	})
	// 219-byte hostname via a search domain: CNAME + A + AAAA is ~580 bytes.
	long := longName + ".default.svc.cluster.local."
	// Without EDNS it does not fit 512 bytes: the addresses come owned by the name asked,
	// without the CNAME, rather than an empty TC answer a client without TCP fallback
	// (musl before 1.2.4) would take as "no address".
	t.Run("local answer over 512 without EDNS: the addresses without the CNAME", func(t *testing.T) {
		// udp: the fast path; udp-z: the Z bit sends it through CoreDNS to kumavip's handler
		for _, network := range []string{"udp", "udp-z"} {
			q := question(long, dns.TypeANY)
			q.Zero = network == "udp-z"
			r := ts.exchange(t, "udp", q)
			var types []uint16
			for _, rr := range r.Answer {
				if !strings.EqualFold(rr.Header().Name, long) {
					t.Errorf("%s: answer owned by %s, want %s", network, rr.Header().Name, long)
				}
				types = append(types, rr.Header().Rrtype)
			}
			if r.Truncated || !slices.Equal(types, []uint16{dns.TypeA, dns.TypeAAAA}) {
				t.Fatalf("%s: want A and AAAA without TC, got TC=%v %v", network, r.Truncated, r.Answer)
			}
		}
	})
	t.Run("same for AAAA alone and for a NODATA type", func(t *testing.T) {
		r := ts.exchange(t, "udp", question(long, dns.TypeAAAA))
		if r.Truncated || len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != dns.TypeAAAA {
			t.Fatalf("AAAA: got TC=%v %v", r.Truncated, r.Answer)
		}
	})
	// hostmaster.<a 247-byte name> would pass 255 bytes (the answer would not parse): the
	// SOA's RNAME is then the name itself. Fast path, CoreDNS path and TCP.
	t.Run("NODATA for a long name: a well-formed SOA", func(t *testing.T) {
		for _, mode := range []string{"udp", "udp-z", "tcp"} {
			for _, name := range []string{long, longName + "."} {
				q := question(name, dns.TypeMX)
				q.Zero = mode == "udp-z"
				r := ts.exchange(t, strings.TrimSuffix(mode, "-z"), q)
				if r.Truncated || r.Rcode != dns.RcodeSuccess || len(r.Answer) > 1 || len(r.Ns) != 1 {
					t.Fatalf("%s %s: want NODATA with an SOA, got %v", mode, name, r)
				}
				owner := name // the name asked, or the CNAME's target (TCP: the whole answer fits)
				if len(r.Answer) == 1 {
					owner = r.Answer[0].(*dns.CNAME).Target
				}
				soa, ok := r.Ns[0].(*dns.SOA)
				wantMbox := "hostmaster." + owner
				if len(owner) > 244 {
					wantMbox = owner
				}
				if !ok || soa.Hdr.Name != owner || soa.Ns != owner || soa.Mbox != wantMbox || soa.Minttl != 30 {
					t.Fatalf("%s %s: SOA %v, want owner and MNAME %s, RNAME %s", mode, name, r.Ns[0], owner, wantMbox)
				}
			}
		}
	})
	t.Run("same with EDNS 1232: fits", func(t *testing.T) {
		q := question(long, dns.TypeANY)
		q.SetEdns0(1232, false)
		r := ts.exchange(t, "udp", q)
		if r.Truncated || len(r.Answer) != 3 {
			t.Fatalf("want 3 answers, got TC=%v %v", r.Truncated, r.Answer)
		}
	})
	t.Run("same over TCP: whole", func(t *testing.T) {
		r := ts.exchange(t, "tcp", question(long, dns.TypeANY))
		if r.Truncated || len(r.Answer) != 3 {
			t.Fatalf("want 3 answers, got TC=%v %v", r.Truncated, r.Answer)
		}
	})
	t.Run("forwarded big answer: TC at the client's size", func(t *testing.T) {
		q := question("big.example.org.", dns.TypeTXT)
		q.SetEdns0(1232, false)
		r := ts.exchange(t, "udp", q)
		if !r.Truncated {
			t.Fatalf("want TC, got %d answers", len(r.Answer))
		}
	})
	t.Run("forwarded big answer over TCP: whole (forward retried over TCP)", func(t *testing.T) {
		r := ts.exchange(t, "tcp", question("big.example.org.", dns.TypeTXT))
		if r.Truncated || len(r.Answer) != 20 {
			t.Fatalf("want 20 TXT, got TC=%v %d", r.Truncated, len(r.Answer))
		}
	})
	// BADVERS (RFC 6891 6.1.3) in an OPT of version 0 with our payload size, the DO bit
	// copied (RFC 3225 3), the other flags and the options not; over UDP and TCP.
	t.Run("EDNS version 1: BADVERS", func(t *testing.T) {
		for _, network := range []string{"udp", "tcp"} {
			for _, name := range []string{"backend.mesh.", "example.org."} {
				for _, do := range []bool{false, true} {
					q := question(name, dns.TypeA)
					q.SetEdns0(1232, do)
					q.IsEdns0().SetVersion(1)
					q.IsEdns0().Hdr.Ttl |= 0x7fff
					q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: 65001, Data: []byte{1}})
					r := ts.exchange(t, network, q)
					o := r.IsEdns0()
					if r.Rcode != dns.RcodeBadVers || len(r.Answer) != 0 || o == nil || o.Version() != 0 ||
						o.Do() != do || o.Hdr.Ttl&0x7fff != 0 || o.UDPSize() != 1232 || len(o.Option) != 0 {
						t.Errorf("%s %s DO=%v: want BADVERS with an OPT of version 0, size 1232, DO %v; got %v",
							network, name, do, do, r)
					}
				}
			}
		}
	})
}

// TestEDNSFlagsCleared: the EDNS flags a client sets that are not DO (the Z bits, RFC 6891
// 6.1.4: "set to zero by senders and ignored by receivers") are not echoed in any answer:
// local, forwarded, forwarded NXDOMAIN, cached and SERVFAIL from a dead upstream, over UDP
// and TCP; DO is. The EDNS compliance tests (DNS flag day 2019, "ednsflags") check exactly
// this.
func TestEDNSFlagsCleared(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := c.LocalAddr().String() // nothing listens: refused at once
	c.Close()
	deadTS := startServer(t, Config{Upstreams: []string{dead}}, testTable())
	for _, srv := range []struct {
		name string
		ts   *testServer
		qs   []string
	}{
		{"", ts, []string{"backend.mesh.", "example.org.", "example.org.", "nope.example.org."}},
		{"dead upstream ", deadTS, []string{"example.org."}},
	} {
		for _, network := range []string{"udp", "tcp"} {
			for _, do := range []bool{false, true} {
				for _, name := range srv.qs {
					q := question(name, dns.TypeA)
					q.SetEdns0(1232, do)
					q.IsEdns0().Hdr.Ttl |= 0x7fff // every Z bit
					r := srv.ts.exchange(t, network, q)
					want := uint32(0)
					if do {
						want = 0x8000
					}
					o := r.IsEdns0()
					if o == nil || o.Hdr.Ttl != want {
						t.Errorf("%s%s %s DO=%v (%s): want an OPT with flags %#x, got %v", srv.name, network, name, do,
							dns.RcodeToString[r.Rcode], want, o)
					}
				}
			}
		}
	}
}

// TestLargeUDPQuery: a UDP query longer than 512 bytes (EDNS padding, RFC 7830, as
// `dig +padding` and stubs padding their queries send it; a large option) is answered like
// a short one, up to the 1232 bytes our OPT advertises and beyond: local names on the fast
// path, forwarded names through CoreDNS (whose UDP reads are 512 bytes).
func TestLargeUDPQuery(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	for _, size := range []int{400, 600, 1232, 4000} {
		for _, name := range []string{"backend.mesh.", "Backend.Mesh.default.svc.cluster.local.", "example.org."} {
			for _, network := range []string{"udp", "tcp"} {
				q := question(name, dns.TypeA)
				q.SetEdns0(1232, true)
				o := q.IsEdns0()
				o.Option = append(o.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0123456789abcdef"})
				o.Option = append(o.Option, &dns.EDNS0_PADDING{Padding: make([]byte, size-q.Len()-4)})
				if q.Len() != size {
					t.Fatalf("query of %d bytes, want %d", q.Len(), size)
				}
				r := ts.exchange(t, network, q)
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || r.IsEdns0() == nil || !r.IsEdns0().Do() {
					t.Errorf("%s query of %d bytes for %s: want an answer with OPT and DO, got %v", network, size, name, r)
				}
			}
		}
	}
}

// TestClassANY: a question of class ANY ("*", RFC 1035 3.2.5) about a name of ours matches
// its IN records: answered here, not forwarded upstream (whose NXDOMAIN would deny a name
// that exists), the question's class echoed, and never authoritative (RFC 1034 3.7.1:
// a server cannot know it holds every class). Other classes (CH) are not ours.
func TestClassANY(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	for _, tc := range []struct {
		qname  string
		qtype  uint16
		answer []string
		soa    bool
	}{
		{"Backend.mesh.", dns.TypeA, []string{"Backend.mesh. 30 IN A 240.0.0.1"}, false},
		{"backend.mesh.", dns.TypeANY, []string{"backend.mesh. 30 IN A 240.0.0.1", "backend.mesh. 30 IN AAAA fd00:fd01::1"}, false},
		{"web.mesh.", dns.TypeAAAA, nil, true},
		{"backend.mesh.", dns.TypeMX, nil, true},
		{"1.0.0.240.in-addr.arpa.", dns.TypePTR, []string{"1.0.0.240.in-addr.arpa. 30 IN PTR backend.mesh."}, false},
		{"backend.mesh.svc.cluster.local.", dns.TypeA, []string{"backend.mesh.svc.cluster.local. 30 IN CNAME backend.mesh.", "backend.mesh. 30 IN A 240.0.0.1"}, false},
	} {
		for _, mode := range []string{"udp", "udp-z", "tcp"} {
			q := question(tc.qname, tc.qtype)
			q.Question[0].Qclass = dns.ClassANY
			q.Zero = mode == "udp-z" // through CoreDNS to the handler
			before := up.queries.Load()
			r := ts.exchange(t, strings.TrimSuffix(mode, "-z"), q)
			if r.Rcode != dns.RcodeSuccess || r.Authoritative || r.Question[0].Qclass != dns.ClassANY ||
				!slices.Equal(rrStrings(r.Answer, true), tc.answer) || (len(r.Ns) == 1) != tc.soa {
				t.Errorf("%s %s %s class ANY: want NOERROR, not AA, class ANY echoed, %q, SOA %v; got %v", mode,
					tc.qname, dns.TypeToString[tc.qtype], tc.answer, tc.soa, r)
			}
			if up.queries.Load() != before {
				t.Errorf("%s %s class ANY went upstream", mode, tc.qname)
			}
		}
	}
	q := question("backend.mesh.", dns.TypeA)
	q.Question[0].Qclass = dns.ClassCHAOS
	before := up.queries.Load()
	if r := ts.exchange(t, "udp", q); r.Authoritative || len(r.Answer) != 0 || up.queries.Load() == before {
		t.Errorf("class CH: want it forwarded, got %v", r)
	}
}

// TestSOAAnswered: the SOA a NODATA carries in its authority section (owned by the name
// asked, or by the CNAME's target) exists: asked for, it is the answer, the same record,
// rather than a NODATA whose authority holds the very SOA it denies.
func TestSOAAnswered(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	for _, tc := range []struct{ qname, owner, cname string }{
		{"Backend.Mesh.", "Backend.Mesh.", ""},
		{"web.mesh.", "web.mesh.", ""},
		{"1.0.0.240.in-addr.arpa.", "1.0.0.240.in-addr.arpa.", ""},
		{"backend.mesh.svc.cluster.local.", "backend.mesh.", "backend.mesh."},
	} {
		for _, mode := range []string{"udp", "udp-z", "tcp"} {
			ask := func(qtype uint16) *dns.Msg {
				q := question(tc.qname, qtype)
				q.Zero = mode == "udp-z"
				return ts.exchange(t, strings.TrimSuffix(mode, "-z"), q)
			}
			nodata := ask(dns.TypeMX)
			r := ask(dns.TypeSOA)
			var soa []dns.RR
			for _, rr := range r.Answer {
				if cn, ok := rr.(*dns.CNAME); ok && cn.Target == tc.cname {
					continue
				}
				soa = append(soa, rr)
			}
			if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Ns) != 0 || len(soa) != 1 || len(nodata.Ns) != 1 ||
				soa[0].String() != nodata.Ns[0].String() || soa[0].Header().Name != tc.owner {
				t.Errorf("%s %s SOA: want the NODATA's SOA (%v) as the answer, owned by %s; got %v", mode, tc.qname, nodata.Ns, tc.owner, r)
			}
		}
	}
}

// TestDefaultNameAnswersAllocateNothing: a default `<service>.mesh` name keeps no string of
// its hostname (vipalloc builds it from its tag); its answers - the name itself, through a
// search domain (a CNAME to it) and by address (a PTR to it) - still name it in full and
// allocate nothing.
func TestDefaultNameAnswersAllocateNothing(t *testing.T) {
	// The example mesh's dataplanes without its policies: every name is a default one, a
	// long Kubernetes-style one among them.
	rs, err := mesh.LoadFile("../testdata/mesh/policies/dataplanes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := rs[0].(*mesh.Dataplane)
	snap, err := mesh.NewSnapshot(self, rs)
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := vipalloc.New(vipalloc.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	table, err := alloc.Allocate(snap)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Addrs: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:9"}, ResolvConf: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	s.resp.search = searchDomains
	s.Swap(table)
	long := false
	for _, e := range table.Available() {
		if e.Origin().Kind != vipalloc.OriginService || !e.IPv4().IsValid() {
			continue
		}
		long = long || len(e.Hostname()) > 32
		checkAnswersAllocateNothing(t, s, e)
	}
	if !long {
		t.Error("no default name longer than 32 bytes in the example mesh")
	}
}

func checkAnswersAllocateNothing(t *testing.T, s *Server, e *vipalloc.Entry) {
	t.Helper()
	host := e.Hostname() + "."
	rev, _ := dns.ReverseAddr(e.IPv4().String())
	for _, tc := range []struct {
		qname string
		qtype uint16
		want  string
	}{
		{host, dns.TypeA, host + " IN A " + e.IPv4().String()},
		{e.Hostname() + "." + searchDomains[1] + ".", dns.TypeA, "IN CNAME " + host},
		{rev, dns.TypePTR, rev + " IN PTR " + host},
	} {
		pkt, _ := question(tc.qname, tc.qtype).Pack()
		out := make([]byte, 0, 1024)
		answer := func() []byte {
			var q query
			if !parseQuery(pkt, &q) {
				t.Fatalf("%s: not parsed", tc.qname)
			}
			resp, kind := s.resp.answer(&q, out[:0], q.limit())
			if kind != answered {
				t.Fatalf("%s: not answered", tc.qname)
			}
			return resp
		}
		var m dns.Msg
		if err := m.Unpack(answer()); err != nil || len(m.Answer) == 0 {
			t.Fatalf("%s: %v, %v", tc.qname, err, m.Answer)
		}
		if got := strings.Join(rrStrings(m.Answer[:1], false), ""); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %s, want %s", tc.qname, got, tc.want)
		}
		if n := testing.AllocsPerRun(100, func() { answer() }); n != 0 {
			t.Errorf("%s: %v allocations an answer", tc.qname, n)
		}
	}
}

// TestPTRNamesHostnameCanonically: a hand-built entry's hostname that is not canonical
// (upper case, a final dot) is answered lower-case and without the dot doubled: the PTR
// names it as its A question would.
func TestPTRNamesHostnameCanonically(t *testing.T) {
	table := vipalloc.NewTable([]*vipalloc.Entry{entry("Mixed.MESH.", "240.0.0.7", "", "hand")}, nil)
	s, err := New(Config{Addrs: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:9"}, ResolvConf: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	s.Swap(table)
	pkt, _ := question("7.0.0.240.in-addr.arpa.", dns.TypePTR).Pack()
	var q query
	if !parseQuery(pkt, &q) {
		t.Fatal("not parsed")
	}
	resp, kind := s.resp.answer(&q, nil, q.limit())
	var m dns.Msg
	if err := m.Unpack(resp); kind != answered || err != nil || len(m.Answer) != 1 {
		t.Fatalf("%v, %v: %v", kind, err, m.Answer)
	}
	if ptr, ok := m.Answer[0].(*dns.PTR); !ok || ptr.Ptr != "mixed.mesh." {
		t.Errorf("PTR answer %v, want mixed.mesh.", m.Answer[0])
	}
}
