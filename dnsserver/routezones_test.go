package dnsserver

import (
	"bytes"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/mesh"
)

// shardInput: shard1 with two ready replicas and one not ready, a users' zone with a CNAME
// to shard1.
func shardInput(ready ...bool) authdns.Input {
	rt := authdns.Router{Name: "shard1", DNS: "shard1.apps.test", Revision: 5}
	for i, ok := range ready {
		rt.Replicas = append(rt.Replicas, authdns.Replica{Name: fmt.Sprint("gw-", i),
			Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, 0, byte(i + 1)})}, Ready: ok})
	}
	return authdns.Input{Routers: []authdns.Router{rt}, UserZones: []string{"acme.test"},
		Users: []authdns.UserName{{Name: "www.acme.test", Router: "shard1", Revision: 6}}}
}

// dnsZones are the catalog's zones as the control plane sends them.
func dnsZones(t testing.TB, cat *authdns.Catalog) []*mesh.DNSZone {
	var out []*mesh.DNSZone
	for _, z := range cat.Zones() {
		var b bytes.Buffer
		if err := authdns.WriteZone(&b, z); err != nil {
			t.Fatal(err)
		}
		o := strings.TrimSuffix(z.Origin, ".")
		out = append(out, &mesh.DNSZone{Meta: mesh.Meta{Name: o}, Origin: o, Zone: b.String()})
	}
	return out
}

func buildCatalog(t testing.TB, in authdns.Input) *authdns.Catalog {
	if len(in.Nameservers) == 0 && !in.DefaultNSAddr.IsValid() {
		in.DefaultNSAddr = netip.AddrFrom4([4]byte{127, 0, 0, 1}) // as kuma-cp serve gives the agents' zones
	}
	cat, problems := authdns.Build(in, nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	return cat
}

// sameAnswer compares two responses as a client sees them: rcode, AA, and each section
// (the address sets rotate: compared as sets).
func sameAnswer(a, b *dns.Msg) bool {
	set := func(rrs []dns.RR) string {
		var s []string
		for _, rr := range rrs {
			if rr.Header().Rrtype != dns.TypeOPT {
				s = append(s, rr.String())
			}
		}
		slices.Sort(s)
		return strings.Join(s, "\n")
	}
	return a.Rcode == b.Rcode && a.Authoritative == b.Authoritative && a.Truncated == b.Truncated &&
		set(a.Answer) == set(b.Answer) && set(a.Ns) == set(b.Ns) && set(a.Extra) == set(b.Extra)
}

// The resolver answers the route zones, over UDP and TCP, exactly as the control plane's
// answer engine does (CNAME chased, NXDOMAIN and NODATA with the SOA); the VIP names and the
// upstream still answer as before; a new set of zones is served at once.
func TestRouteZonesAnswered(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	cat := buildCatalog(t, shardInput(true, true, false))
	if err := ts.SwapZones(dnsZones(t, cat)); err != nil {
		t.Fatal(err)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
		rcode int
		n     int // answer records
	}{
		{"web-acme.shard1.apps.test.", dns.TypeA, dns.RcodeSuccess, 2},
		{"WWW.acme.test.", dns.TypeA, dns.RcodeSuccess, 3},
		{"www.acme.test.", dns.TypeAAAA, dns.RcodeSuccess, 1}, // the CNAME, then NODATA
		{"nope.acme.test.", dns.TypeA, dns.RcodeNameError, 0},
		{"shard1.apps.test.", dns.TypeA, dns.RcodeSuccess, 0}, // the apex: no wildcard (RFC 4592)
		{"shard1.apps.test.", dns.TypeSOA, dns.RcodeSuccess, 1},
	} {
		for _, nw := range []string{"udp", "tcp"} {
			req := question(q.name, q.qtype)
			req.SetEdns0(1232, false)
			got := ts.exchange(t, nw, req)
			want := cat.Reply(req, nw == "tcp")
			if !sameAnswer(got, want) || got.Rcode != q.rcode || len(got.Answer) != q.n {
				t.Errorf("%s %s %s: got\n%v\nthe control plane's answer\n%v", nw, q.name, dns.TypeToString[q.qtype], got, want)
			}
			if got.Rcode != dns.RcodeSuccess || q.n == 0 {
				if len(got.Ns) != 1 || got.Ns[0].Header().Rrtype != dns.TypeSOA {
					t.Errorf("%s %s: a negative answer without the SOA: %v", nw, q.name, got)
				}
			}
		}
	}
	// the rest of the resolver is untouched
	if r := ts.exchange(t, "udp", question("backend.mesh.", dns.TypeA)); len(r.Answer) != 1 {
		t.Fatalf("a VIP name: %v", r)
	}
	if r := ts.exchange(t, "udp", question("example.org.", dns.TypeA)); len(r.Answer) != 1 || r.Authoritative {
		t.Fatalf("an upstream name: %v", r)
	}
	// the address set rotates: both orders appear, the set is always whole
	orders := map[string]bool{}
	for range 20 {
		r := ts.exchange(t, "udp", question("x.shard1.apps.test.", dns.TypeA))
		var o []string
		for _, rr := range r.Answer {
			o = append(o, rr.(*dns.A).A.String())
		}
		if len(o) != 2 {
			t.Fatalf("an incomplete set: %v", r)
		}
		orders[strings.Join(o, ",")] = true
	}
	if len(orders) != 2 {
		t.Errorf("orders seen over 20 answers: %v, want both", orders)
	}
	// a replica going not-ready is gone from the next answer
	if err := ts.SwapZones(dnsZones(t, buildCatalog(t, shardInput(true, false, false)))); err != nil {
		t.Fatal(err)
	}
	r := ts.exchange(t, "udp", question("x.shard1.apps.test.", dns.TypeA))
	if len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.1.0.1" {
		t.Fatalf("after the swap: %v", r)
	}
	// no zones at all: the names go upstream again
	if err := ts.SwapZones(nil); err != nil {
		t.Fatal(err)
	}
	if r := ts.exchange(t, "udp", question("x.shard1.apps.test.", dns.TypeA)); r.Authoritative || r.Rcode != dns.RcodeNameError {
		t.Fatalf("with no zones, want the upstream's NXDOMAIN: %v", r)
	}
}

// The DO bit of a query is copied in the answer (RFC 3225 3) on the UDP fast path as
// over TCP, positive and negative answers alike, and the other EDNS flags are not; RA is
// set, as in every answer of this (recursive) server.
func TestRouteZonesFlags(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	if err := ts.SwapZones(dnsZones(t, buildCatalog(t, shardInput(true, true, false)))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web-acme.shard1.apps.test.", "nope.acme.test."} {
		for _, nw := range []string{"udp", "tcp"} {
			for _, do := range []bool{false, true} {
				req := question(name, dns.TypeA)
				req.SetEdns0(1232, do)
				req.IsEdns0().Hdr.Ttl |= 0x7fff
				r := ts.exchange(t, nw, req)
				want := uint32(0)
				if do {
					want = 0x8000
				}
				if o := r.IsEdns0(); !r.Authoritative || !r.RecursionAvailable || o == nil || o.Hdr.Ttl != want {
					t.Errorf("%s %s DO=%v: want an authoritative answer with RA and OPT flags %#x, got %v", nw, name, do, want, r)
				}
			}
		}
	}
}

// A zone that does not parse is named in the error and left out; the others are served.
func TestRouteZonesBadZoneLeftOut(t *testing.T) {
	up := startUpstream(t)
	ts := startServer(t, Config{Upstreams: []string{up.addr}}, testTable())
	zones := dnsZones(t, buildCatalog(t, shardInput(true)))
	zones = append(zones, &mesh.DNSZone{Meta: mesh.Meta{Name: "bad.test"}, Origin: "bad.test", Zone: "$ORIGIN bad.test.\nwww 30 IN A 10.0.0.1\n"})
	err := ts.SwapZones(zones)
	if err == nil || !strings.Contains(err.Error(), `dnszone "bad.test"`) {
		t.Fatalf("want an error naming the zone, got %v", err)
	}
	if r := ts.exchange(t, "udp", question("x.shard1.apps.test.", dns.TypeA)); len(r.Answer) != 1 {
		t.Fatalf("the good zone: %v", r)
	}
}

// BenchmarkSwapZones1k: what the route zones cost an agent - 10 shard zones of 3 replicas
// and a users' zone of 1,000 CNAMEs, parsed and prepared from their text (every change of
// any zone re-parses only that zone; this is all of them), and the heap they hold.
//
//	go test -run '^$' -bench SwapZones1k -benchmem ./dnsserver
func BenchmarkSwapZones1k(b *testing.B) {
	in := authdns.SyntheticInput(10, 3, 1000)
	zones := dnsZones(b, buildCatalog(b, in))
	s := &Server{log: slog.New(slog.DiscardHandler)}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if err := s.SwapZones(zones); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / 1024
	b.ReportAllocs()
	for b.Loop() {
		s.zones.parsed = nil // parse everything each time
		if err := s.SwapZones(zones); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(held, "held-KiB")
}
