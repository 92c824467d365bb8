package dnsserver

import (
	"context"
	"net"
	"testing"

	"github.com/miekg/dns"
)

// BenchmarkSwap100k: indexing a 100,000-name table (the bar: < 50 ms).
func BenchmarkSwap100k(b *testing.B) {
	tbl := bigTable(100_000, 0)
	s, err := New(Config{Addrs: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:9"}, ResolvConf: "/nonexistent"})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		s.Swap(tbl)
	}
}

func benchResponder(b *testing.B) *Server {
	s, err := New(Config{Addrs: []string{"127.0.0.1:0"}, Upstreams: []string{"127.0.0.1:9"}, ResolvConf: "/nonexistent"})
	if err != nil {
		b.Fatal(err)
	}
	s.resp.search = searchDomains
	s.Swap(bigTable(100_000, 0))
	return s
}

// BenchmarkFastPath: what the UDP fast path does per query besides the two syscalls -
// parse the packet, look the name up, write the answer.
func BenchmarkFastPath(b *testing.B) {
	s := benchResponder(b)
	for _, tc := range []struct {
		name  string
		qname string
		qtype uint16
	}{
		{"A", "svc-4242.mesh.", dns.TypeA},
		{"AAAA", "svc-4242.mesh.", dns.TypeAAAA},
		{"search-CNAME", "svc-4242.mesh.svc.cluster.local.", dns.TypeA},
		{"PTR", "66.16.0.240.in-addr.arpa.", dns.TypePTR},
	} {
		b.Run(tc.name, func(b *testing.B) {
			pkt, _ := question(tc.qname, tc.qtype).Pack()
			out := make([]byte, 0, 1024)
			b.ReportAllocs()
			for b.Loop() {
				var q query
				if !parseQuery(pkt, &q) {
					b.Fatal("not parsed")
				}
				resp, kind := s.resp.answer(&q, out[:0], q.limit())
				if kind != answered {
					b.Fatal("not answered")
				}
				out = resp[:0]
			}
		})
	}
}

// discardWriter is a dns.ResponseWriter that drops what is written.
type discardWriter struct{ n int }

func (d *discardWriter) LocalAddr() net.Addr         { return &net.UDPAddr{} }
func (d *discardWriter) RemoteAddr() net.Addr        { return &net.UDPAddr{} }
func (d *discardWriter) WriteMsg(m *dns.Msg) error   { d.n++; return nil }
func (d *discardWriter) Write(b []byte) (int, error) { d.n++; return len(b), nil }
func (d *discardWriter) Close() error                { return nil }
func (d *discardWriter) TsigStatus() error           { return nil }
func (d *discardWriter) TsigTimersOnly(bool)         {}
func (d *discardWriter) Hijack()                     {}

// BenchmarkServeDNS: the kumavip handler as CoreDNS calls it (TCP and the UDP queries the
// fast path leaves to CoreDNS), from a parsed *dns.Msg to the written answer.
func BenchmarkServeDNS(b *testing.B) {
	s := benchResponder(b)
	h := &handler{s: s}
	w := &discardWriter{}
	r := question("svc-4242.mesh.", dns.TypeA)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		h.ServeDNS(ctx, w, r)
	}
	if w.n == 0 {
		b.Fatal("nothing written")
	}
}

// BenchmarkUDPQuery: one real query over loopback UDP through the fast path (client time
// included; bench/dns.sh measures the server's CPU per query with dnsperf).
func BenchmarkUDPQuery(b *testing.B) {
	ts := startServer(b, Config{Upstreams: []string{"127.0.0.1:9"}}, bigTable(100_000, 0))
	c, err := net.Dial("udp", ts.udp)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	pkt, _ := question("svc-4242.mesh.", dns.TypeA).Pack()
	buf := make([]byte, 512)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(pkt); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			b.Fatal(err)
		}
	}
}
