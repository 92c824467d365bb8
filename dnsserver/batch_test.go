package dnsserver

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// A burst from several clients - queries the fast path answers, queries CoreDNS forwards
// upstream and malformed ones, sent without waiting so that the socket holds many at once
// (read and answered in batches where the platform has them) - gets every client exactly
// its own answers, each right, on IPv4 and IPv6.
func TestBurstOfMixedQueriesFromManyClients(t *testing.T) {
	up := startUpstream(t)
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(addr, func(t *testing.T) {
			if addr[0] == '[' {
				if c, err := net.ListenPacket("udp6", "[::1]:0"); err != nil {
					t.Skipf("no IPv6 loopback here: %v", err)
				} else {
					c.Close()
				}
			}
			ts := startServer(t, Config{Addrs: []string{addr}, Upstreams: []string{up.addr}}, testTable())
			const clients, perClient = 6, 24
			conns := make([]net.Conn, clients)
			for i := range conns {
				c, err := net.Dial("udp", ts.udp)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				conns[i] = c
			}
			want := map[string]func(*dns.Msg) error{}
			for k := range perClient {
				for i, c := range conns {
					id := uint16(i*perClient + k + 1)
					var wire []byte
					var check func(*dns.Msg) error
					switch k % 3 {
					case 0: // ours: the fast path
						m := question("web.mesh.", dns.TypeA)
						m.Id = id
						wire, _ = m.Pack()
						check = answersOneA("web.mesh", "240.0.0.2")
					case 1: // not ours: CoreDNS, then the upstream
						m := question("example.org.", dns.TypeA)
						m.Id = id
						wire, _ = m.Pack()
						check = answersOneA("example.org", "93.184.216.34")
					default: // a question count of 2: FORMERR, as CoreDNS answers it
						m := question("web.mesh.", dns.TypeA)
						m.Id = id
						m.Question = append(m.Question, m.Question[0])
						wire, _ = m.Pack()
						check = func(r *dns.Msg) error {
							if r.Rcode != dns.RcodeFormatError {
								return fmt.Errorf("two questions: rcode %s", dns.RcodeToString[r.Rcode])
							}
							return nil
						}
					}
					want[fmt.Sprint(i, "/", id)] = check
					if _, err := c.Write(wire); err != nil {
						t.Fatal(err)
					}
				}
			}
			buf := make([]byte, 4096)
			for i, c := range conns {
				for range perClient {
					c.SetReadDeadline(time.Now().Add(10 * time.Second))
					n, err := c.Read(buf)
					if err != nil {
						t.Fatalf("client %d: %v (answers missing)", i, err)
					}
					r := new(dns.Msg)
					if err := r.Unpack(buf[:n]); err != nil {
						t.Fatalf("client %d: an answer that does not unpack: %v", i, err)
					}
					key := fmt.Sprint(i, "/", r.Id)
					check, ok := want[key]
					if !ok {
						t.Fatalf("client %d: an answer with id %d it did not ask, or twice", i, r.Id)
					}
					delete(want, key)
					if err := check(r); err != nil {
						t.Fatalf("client %d id %d: %v", i, r.Id, err)
					}
				}
			}
			if len(want) != 0 {
				t.Fatalf("%d queries unanswered", len(want))
			}
		})
	}
}

// answersOneA checks that an answer to name is one A record of addr.
func answersOneA(name, addr string) func(*dns.Msg) error {
	return func(r *dns.Msg) error {
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
			return fmt.Errorf("%s: %v", name, r)
		}
		if a, ok := r.Answer[0].(*dns.A); !ok || a.A.String() != addr {
			return fmt.Errorf("%s: %v", name, r)
		}
		return nil
	}
}
