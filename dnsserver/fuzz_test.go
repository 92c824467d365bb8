package dnsserver

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// FuzzServe feeds raw packets to a real server over UDP and TCP (and to the fast path's
// parser, responder, rejections and BADVERS directly). Whatever comes in: no crash, no hang, every reply is a
// well-formed DNS message with the query's id, and the server keeps answering.
// Seeds: seeds() plus testdata/fuzz/FuzzServe (written by TestMalformed -update).
//
//	go test -run '^$' -fuzz FuzzServe -fuzztime 15s -fuzzminimizetime 5s ./dnsserver
func FuzzServe(f *testing.F) {
	for _, s := range seeds() {
		f.Add(s.pkt)
	}
	up := startUpstream(f)
	ts := startServer(f, Config{Upstreams: []string{up.addr}}, testTable())
	health := question("backend.mesh.", dns.TypeA)
	f.Fuzz(func(t *testing.T, pkt []byte) {
		var q query
		if parseQuery(pkt, &q) {
			resp, kind := ts.resp.answer(&q, nil, q.limit())
			if kind != notOurs {
				m := new(dns.Msg)
				if err := m.Unpack(resp); err != nil {
					t.Fatalf("fast-path answer does not parse: %v\nquery %x\nanswer %x", err, pkt, resp)
				}
				if m.Id != q.id || len(m.Question) != 1 {
					t.Fatalf("fast-path answer: id %d questions %d", m.Id, len(m.Question))
				}
			}
		}
		if resp, ok := reject(nil, pkt); ok {
			m := new(dns.Msg)
			if err := m.Unpack(resp); err != nil || m.Rcode != dns.RcodeFormatError && m.Rcode != dns.RcodeNotImplemented ||
				m.Rcode == dns.RcodeFormatError && m.IsEdns0() == nil {
				t.Fatalf("FORMERR with OPT or NOTIMP: %v %v\nquery %x\nanswer %x", err, m, pkt, resp)
			}
		}
		if resp, ok := badVers(nil, pkt); ok {
			m := new(dns.Msg)
			if err := m.Unpack(resp); err != nil || m.Rcode != dns.RcodeBadVers || m.IsEdns0().Version() != 0 {
				t.Fatalf("BADVERS: %v %v\nquery %x\nanswer %x", err, m, pkt, resp)
			}
		}
		for _, network := range []string{"udp", "tcp"} {
			// A missing or late reply is no failure (many packets get none); a wrong one is.
			reply, err := sendRaw(network, ts.udp, pkt, 10*time.Millisecond)
			if reply != nil && err != nil {
				t.Fatalf("%s: %v", network, err)
			}
			if reply != nil && len(pkt) >= 2 && reply.Id != binary.BigEndian.Uint16(pkt) {
				t.Fatalf("%s: reply id %d for query id %d", network, reply.Id, binary.BigEndian.Uint16(pkt))
			}
		}
		health.Id = dns.Id()
		if r := ts.exchange(t, "udp", health); len(r.Answer) != 1 {
			t.Fatalf("server stopped answering: %v", r)
		}
	})
}
