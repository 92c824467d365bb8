package authdns

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// A burst of mixed queries, over IPv4 and IPv6 loopback: those the prepared form takes and
// those it leaves to the full path (ANY, CHAOS, a transfer over UDP) arrive in the same
// batches; every one is answered, to its sender, with its id, as Reply answers it.
func TestUDPBatchAnswersEveryQuery(t *testing.T) {
	cat, problems := Build(fixture(), nil)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			s, err := New(Config{Address: addr})
			if err != nil {
				t.Skipf("%s: %v", addr, err)
			}
			s.Swap(cat)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- s.Run(ctx) }()
			defer func() { cancel(); <-done }()
			udp, _ := s.Addrs()
			conn, err := net.Dial("udp", udp.String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			type q struct {
				name   string
				qtype  uint16
				qclass uint16
			}
			qs := []q{
				{"web.shard1.apps.example.com.", dns.TypeA, dns.ClassINET},
				{"www.acme.test.", dns.TypeA, dns.ClassINET},
				{"www.acme.test.", dns.TypeANY, dns.ClassINET},
				{"nope.acme.test.", dns.TypeAAAA, dns.ClassINET},
				{"www.acme.test.", dns.TypeA, dns.ClassCHAOS},
				{"acme.test.", dns.TypeAXFR, dns.ClassINET},
				{"example.org.", dns.TypeA, dns.ClassINET},
			}
			sent := map[uint16]*dns.Msg{}
			for round := range 3 { // the serve loop may still be starting: resend what is unanswered
				for i := range 50 {
					m := new(dns.Msg)
					qq := qs[i%len(qs)]
					m.SetQuestion(qq.name, qq.qtype)
					m.Question[0].Qclass = qq.qclass
					m.Id = uint16(i + 1)
					if _, unanswered := sent[m.Id]; round > 0 && !unanswered {
						continue
					}
					p, _ := m.Pack()
					if _, err := conn.Write(p); err != nil {
						t.Fatal(err)
					}
					if round == 0 {
						sent[m.Id] = m
					}
				}
				got := map[uint16]bool{}
				buf := make([]byte, 65535)
				conn.SetReadDeadline(time.Now().Add(2 * time.Second))
				for len(got) < len(sent) {
					n, err := conn.Read(buf)
					if err != nil {
						break
					}
					r := new(dns.Msg)
					if err := r.Unpack(buf[:n]); err != nil {
						t.Fatalf("an answer does not unpack: %v", err)
					}
					req := sent[r.Id]
					if req == nil {
						t.Fatalf("an answer with id %d, never asked", r.Id)
					}
					want := cat.Reply(req, false)
					if req.Question[0].Qtype == dns.TypeAXFR {
						want.Rcode = dns.RcodeRefused // a transfer is refused over UDP
						want.Answer, want.Ns = nil, nil
					}
					if r.Rcode != want.Rcode || len(r.Answer) != len(want.Answer) || len(r.Ns) != len(want.Ns) {
						t.Errorf("id %d %v: got\n%v\nwant\n%v", r.Id, req.Question[0], r, want)
					}
					got[r.Id] = true
				}
				if len(got) == len(sent) {
					return
				}
				for id := range got {
					delete(sent, id)
				}
			}
			t.Fatalf("%d queries never answered", len(sent))
		})
	}
}
