package authdns

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

const testKey = "kuma-xfr"
const testSecret = "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LTEyMzQ=" // base64

// startServer runs a server on a free loopback port with cat, until the test ends.
func startServer(t *testing.T, cfg Config, cat *Catalog) *Server {
	t.Helper()
	cfg.Address = "127.0.0.1:0"
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Swap(cat)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s
}

func exchange(t *testing.T, s *Server, net string, m *dns.Msg) *dns.Msg {
	t.Helper()
	udp, tcp := s.Addrs()
	addr := udp.String()
	if net == "tcp" {
		addr = tcp.String()
	}
	c := &dns.Client{Net: net, Timeout: 5 * time.Second}
	var r *dns.Msg
	var err error
	for range 20 { // the serve loops may still be starting
		if r, _, err = c.Exchange(m, addr); err == nil {
			return r
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s exchange: %v", net, err)
	return nil
}

func bigInput() Input {
	in := fixture()
	var reps []Replica
	for i := range 60 {
		reps = append(reps, Replica{Name: fmt.Sprint("gw", i), Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 9, 0, byte(i)})}, Ready: true})
	}
	in.Routers = append(in.Routers, Router{Name: "big", DNS: "big.apps.example.com", Replicas: reps, Revision: 30})
	return in
}

func TestServerAnswersOverUDPAndTCP(t *testing.T) {
	cat, _ := Build(bigInput(), nil)
	s := startServer(t, Config{}, cat)
	for _, n := range []string{"udp", "tcp"} {
		q := new(dns.Msg)
		q.SetQuestion("www.acme.test.", dns.TypeA)
		r := exchange(t, s, n, q)
		if !r.Authoritative || r.Rcode != dns.RcodeSuccess || len(r.Answer) != 3 {
			t.Fatalf("%s: %v", n, r)
		}
		q.SetQuestion("nope.b.acme.test.", dns.TypeA)
		if r := exchange(t, s, n, q); r.Rcode != dns.RcodeNameError || len(r.Ns) != 1 {
			t.Fatalf("%s NXDOMAIN: %v", n, r)
		}
	}
	// 60 addresses do not fit 512 bytes: truncated over UDP without EDNS, whole over TCP
	// and with EDNS
	q := new(dns.Msg)
	q.SetQuestion("x.big.apps.example.com.", dns.TypeA)
	if r := exchange(t, s, "udp", q); !r.Truncated {
		t.Fatalf("no TC on a %d-answer UDP response", len(r.Answer))
	}
	if r := exchange(t, s, "tcp", q); r.Truncated || len(r.Answer) != 60 {
		t.Fatalf("tcp: TC=%v, %d answers", r.Truncated, len(r.Answer))
	}
	q.SetEdns0(4096, false)
	r := exchange(t, s, "udp", q)
	if r.Truncated || len(r.Answer) != 60 || r.IsEdns0() == nil || r.IsEdns0().UDPSize() != ednsSize {
		t.Fatalf("EDNS: TC=%v, %d answers, opt %v", r.Truncated, len(r.Answer), r.IsEdns0())
	}
}

func TestServerRefusesWhatItDoesNotServe(t *testing.T) {
	cat, _ := Build(fixture(), nil)
	s := startServer(t, Config{}, cat)
	notify := new(dns.Msg)
	notify.SetNotify("shard1.apps.example.com.")
	if r := exchange(t, s, "udp", notify); r.Rcode != dns.RcodeNotImplemented {
		t.Errorf("NOTIFY to the primary: %s", dns.RcodeToString[r.Rcode])
	}
	twoOPT := new(dns.Msg)
	twoOPT.SetQuestion("x.shard1.apps.example.com.", dns.TypeA)
	twoOPT.SetEdns0(1232, false)
	twoOPT.SetEdns0(1232, false)
	twoOPT.Extra = append(twoOPT.Extra, dns.Copy(twoOPT.Extra[0]))
	if r := exchange(t, s, "udp", twoOPT); r.Rcode != dns.RcodeFormatError {
		t.Errorf("two OPT records: %s, want FORMERR", dns.RcodeToString[r.Rcode])
	}
	v1 := new(dns.Msg)
	v1.SetQuestion("x.shard1.apps.example.com.", dns.TypeA)
	v1.SetEdns0(1232, false)
	v1.IsEdns0().SetVersion(1)
	if r := exchange(t, s, "udp", v1); r.Rcode != dns.RcodeBadVers {
		t.Errorf("EDNS version 1: %s, want BADVERS", dns.RcodeToString[r.Rcode])
	}
	chaos := new(dns.Msg)
	chaos.SetQuestion("version.bind.", dns.TypeTXT)
	chaos.Question[0].Qclass = dns.ClassCHAOS
	if r := exchange(t, s, "udp", chaos); r.Rcode != dns.RcodeRefused {
		t.Errorf("CHAOS: %s", dns.RcodeToString[r.Rcode])
	}
}

func transferred(t *testing.T, s *Server, zone string, tsig bool) ([]dns.RR, error) {
	t.Helper()
	_, tcp := s.Addrs()
	m := new(dns.Msg)
	m.SetAxfr(zone)
	tr := new(dns.Transfer)
	if tsig {
		m.SetTsig(testKey+".", dns.HmacSHA256, 300, time.Now().Unix())
		tr.TsigSecret = map[string]string{testKey + ".": testSecret}
	}
	env, err := tr.In(m, tcp.String())
	if err != nil {
		return nil, err
	}
	var rrs []dns.RR
	for e := range env {
		if e.Error != nil {
			return rrs, e.Error
		}
		rrs = append(rrs, e.RR...)
	}
	return rrs, nil
}

func TestZoneTransfer(t *testing.T) {
	cat, _ := Build(bigInput(), nil)
	z := cat.Zone("big.apps.example.com")
	// loopback is not allowed: refused without the key, served with it
	s := startServer(t, Config{TSIG: map[string]string{testKey: testSecret}}, cat)
	if rrs, err := transferred(t, s, z.Origin, false); err == nil {
		t.Fatalf("transfer without TSIG from a network not allowed: %d records", len(rrs))
	}
	rrs, err := transferred(t, s, z.Origin, true)
	if err != nil {
		t.Fatal(err)
	}
	want := len(z.Records()) + 1
	if len(rrs) != want || rrs[0].Header().Rrtype != dns.TypeSOA || rrs[len(rrs)-1].Header().Rrtype != dns.TypeSOA {
		t.Fatalf("AXFR gave %d records (want %d, SOA first and last)", len(rrs), want)
	}
	// allowed by network, no key
	s2 := startServer(t, Config{TransferFrom: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, cat)
	if _, err := transferred(t, s2, z.Origin, false); err != nil {
		t.Fatalf("allowed network: %v", err)
	}
	// AXFR over UDP is refused; IXFR over UDP gets the SOA (the client retries over TCP)
	q := new(dns.Msg)
	q.SetAxfr(z.Origin)
	if r := exchange(t, s2, "udp", q); r.Rcode != dns.RcodeRefused {
		t.Errorf("AXFR over UDP: %s", dns.RcodeToString[r.Rcode])
	}
	q = new(dns.Msg)
	q.SetIxfr(z.Origin, 1, "ns1.example.com.", "h.example.com.")
	if r := exchange(t, s2, "udp", q); len(r.Answer) != 1 || r.Answer[0].(*dns.SOA).Serial != z.Serial() {
		t.Errorf("IXFR over UDP: %v", r)
	}
	// a zone we do not have
	q = new(dns.Msg)
	q.SetAxfr("example.org.")
	if r := exchange(t, s2, "tcp", q); r.Rcode != dns.RcodeNotAuth {
		t.Errorf("AXFR of a foreign zone: %s", dns.RcodeToString[r.Rcode])
	}
}

// An OPT record owned by another name than the root, or outside the additional section, is
// a FORMERR (RFC 6891 6.1.1), as nsd answers it; DO is echoed (RFC 3225 3), on both paths.
func TestOPTPlacementAndDO(t *testing.T) {
	cat, _ := Build(fixture(), nil)
	s := startServer(t, Config{}, cat)
	notRoot := new(dns.Msg)
	notRoot.SetQuestion("x.shard1.apps.example.com.", dns.TypeA)
	notRoot.SetEdns0(1232, false)
	notRoot.Extra[0].Header().Name = "example.org."
	inAnswer := new(dns.Msg)
	inAnswer.SetQuestion("x.shard1.apps.example.com.", dns.TypeA)
	inAnswer.SetEdns0(1232, false)
	inAnswer.Answer, inAnswer.Extra = inAnswer.Extra, nil
	for what, q := range map[string]*dns.Msg{"OPT not at the root": notRoot, "OPT in the answer section": inAnswer} {
		if r := exchange(t, s, "udp", q); r.Rcode != dns.RcodeFormatError {
			t.Errorf("%s: %s, want FORMERR", what, dns.RcodeToString[r.Rcode])
		}
	}
	for _, qtype := range []uint16{dns.TypeA, dns.TypeANY} { // the prepared path, the full one
		q := new(dns.Msg)
		q.SetQuestion("x.shard1.apps.example.com.", qtype)
		q.SetEdns0(1232, true)
		for _, net := range []string{"udp", "tcp"} {
			if r := exchange(t, s, net, q); r.IsEdns0() == nil || !r.IsEdns0().Do() {
				t.Errorf("%s %s with DO: the answer's OPT is %v, want DO set", net, dns.TypeToString[qtype], r.IsEdns0())
			}
		}
	}
}

// A secondary that refuses a NOTIFY gets it again after the retry interval, doubled each
// time (RFC 1996 3.6) - the retries used to go out in the same millisecond.
func TestNotifyRetriesAreSpaced(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var mu sync.Mutex
	var arrived []time.Time
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			req := new(dns.Msg)
			if req.Unpack(buf[:n]) != nil || req.Opcode != dns.OpcodeNotify {
				continue
			}
			mu.Lock()
			arrived = append(arrived, time.Now())
			mu.Unlock()
			resp := new(dns.Msg)
			resp.SetRcode(req, dns.RcodeServerFailure)
			out, _ := resp.Pack()
			pc.WriteTo(out, from)
		}
	}()
	const retry = 150 * time.Millisecond
	cat, _ := Build(fixture(), nil)
	s := startServer(t, Config{Secondaries: []string{pc.LocalAddr().String()}, NotifyRetry: retry}, &Catalog{zones: map[string]*Zone{}})
	s.Swap(&Catalog{zones: map[string]*Zone{"shard1.apps.example.com.": cat.Zone("shard1.apps.example.com")}})
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		n := len(arrived)
		got := slices.Clone(arrived)
		mu.Unlock()
		if n >= 3 {
			for i := 1; i < len(got); i++ {
				if gap, want := got[i].Sub(got[i-1]), retry<<(i-1); gap < want {
					t.Fatalf("NOTIFY attempt %d came %v after the previous one, want at least %v", i+1, gap, want)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d NOTIFY attempts within 20 s, want 3", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
