package dnsserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"time"

	"github.com/miekg/dns"
)

// fastConn is the UDP socket as CoreDNS's server sees it. Its ReadFrom answers the queries
// for names we own right here - parse, look up, append a prepared-shape answer, one write,
// no allocation - and returns only the other packets to CoreDNS, which then pays its
// per-query costs (a goroutine, unpacking, the plugin chain) for them alone.
//
// ReadFrom is called by one goroutine only (the server's read loop), which owns out.
type fastConn struct {
	*net.UDPConn
	s   *Server
	in  []byte // what the socket is read into: CoreDNS's own buffers are 512 bytes
	out []byte
	b   *batchIO // datagrams read and answered many a system call (batch_linux.go), when available
}

// maxUDPQuery is the longest UDP query read whole: at least the payload size our OPT
// advertises (ednsUDPSize), which a client may send us (RFC 6891 6.2.5), padded queries
// included (RFC 7830).
const maxUDPQuery = 4096

// answerHere answers p when the fast path can (a name we own, a route name, or a FORMERR,
// NOTIMP or BADVERS as CoreDNS would answer it), appending to out; else it returns the
// packet to hand to CoreDNS (p, or p without its EDNS options when only they make it
// longer than max, what CoreDNS reads).
func (c *fastConn) answerHere(p, out []byte, max int) (resp []byte, answered bool, forward []byte) {
	var q query
	parsed := parseQuery(p, &q)
	if parsed {
		resp, kind := c.s.resp.answer(&q, out, q.limit())
		if kind != notOurs {
			c.s.counted(kind, q.qtype)
			return resp, true, nil
		}
		out = resp[:0]
	}
	if resp, ok := c.s.answerRoute(out, p); ok { // routezones.go
		return resp, true, nil
	}
	if !parsed { // FORMERR, NOTIMP and BADVERS as CoreDNS would answer them, rightly
		resp, ok := reject(out, p)
		if !ok {
			resp, ok = badVers(out, p)
		}
		if ok {
			return resp, true, nil
		}
	}
	if len(p) > max && parsed && q.edns {
		// Longer than CoreDNS reads (512 bytes: cut short, it would be a FORMERR) only by
		// its EDNS options (padding, ...): the same query without them. They are
		// hop-by-hop: not forwarded, and none is echoed in an answer.
		at := headerLen + len(q.qname) + 4 // the OPT record
		p[at+9], p[at+10] = 0, 0           // RDLENGTH
		p = p[:at+11]
	}
	return out, false, p
}

// readOne is ReadFrom one datagram a system call (where batches are not available).
func (c *fastConn) readOne(b []byte) (int, net.Addr, error) {
	if c.out == nil {
		c.out = make([]byte, 0, 1024)
		c.in = make([]byte, maxUDPQuery)
	}
	for {
		n, from, err := c.UDPConn.ReadFromUDPAddrPort(c.in)
		if err != nil {
			return 0, nil, err
		}
		resp, answered, fwd := c.answerHere(c.in[:n], c.out[:0], len(b))
		c.out = resp[:0]
		if answered {
			c.UDPConn.WriteToUDPAddrPort(resp, from) // UDP: a lost answer is retried by the client
			continue
		}
		return copy(b, fwd), net.UDPAddrFromAddrPort(from), nil
	}
}

// optListener is the TCP listener as CoreDNS's server sees it: its connections write the
// FORMERR miekg/dns sends about a query with an OPT record (before CoreDNS sees the query)
// with one, its FORMERR to an opcode without a question as NOTIMP, and CoreDNS's BADVERS
// with our OPT, as the UDP fast path does (reject, badVers).
type optListener struct{ net.Listener }

func (l optListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &optConn{Conn: c}, nil
}

// optConn keeps the query being answered: miekg/dns serves a connection's queries one at a
// time (it reads a whole one - two-byte length, message - and writes its answer before it
// reads the next), so the last message read since the last write is that query (those
// before it got no answer: a response, a message shorter than a header).
type optConn struct {
	net.Conn
	query []byte
	wrote bool
}

func (c *optConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.wrote {
		c.query, c.wrote = c.query[:0], false
	}
	if len(c.query)+n <= 2+dns.MaxMsgSize {
		c.query = append(c.query, b[:n]...)
	}
	return n, err
}

func (c *optConn) Write(b []byte) (int, error) {
	c.wrote = true
	q := lastFrame(c.query)
	if len(b) < 2+headerLen || b[4]&0x80 == 0 || len(q) < headerLen {
		return c.Conn.Write(b)
	}
	var resp []byte
	ok := false
	switch rcode := b[5] & 0xF; {
	case rcode == dns.RcodeFormatError && string(b[8:14]) == "\x00\x00\x00\x00\x00\x00":
		// miekg/dns's FORMERR: no records (the question when it could unpack it)
		resp, ok = reject(make([]byte, 2, 2+headerLen+11), q)
	case rcode == dns.RcodeBadVers&0xF && b[12] == 0 && b[13] == 1:
		// maybe CoreDNS's BADVERS: its low 4 bits, one additional record
		resp, ok = badVers(make([]byte, 2, 512), q)
	}
	if ok && binary.BigEndian.Uint16(resp[2:]) != binary.BigEndian.Uint16(b[2:]) {
		ok = false // not the query answered after all: leave the answer as it is
	}
	if !ok {
		return c.Conn.Write(b)
	}
	binary.BigEndian.PutUint16(resp, uint16(len(resp)-2))
	_, err := c.Conn.Write(resp)
	return len(b), err
}

// lastFrame returns the last whole message of s, a stream of messages each after its
// two-byte length (RFC 1035 4.2.2), or nil.
func lastFrame(s []byte) []byte {
	var last []byte
	for len(s) >= 2 {
		l := int(binary.BigEndian.Uint16(s))
		if len(s) < 2+l {
			break
		}
		last, s = s[2:2+l], s[2+l:]
	}
	return last
}

// probeAll sends each listener a query it answers without upstream (an unassigned opcode:
// NOTIMP from the server loop itself) until it answers. A reply proves the serve loop runs,
// so a later Stop reaches it (stopping a server whose loop has not started does nothing).
func (s *Server) probeAll(ctx context.Context, socks []socketPair) error {
	deadline := time.Now().Add(readyTimeout)
	for _, k := range socks {
		for _, nw := range []struct {
			net  string
			addr net.Addr
		}{{"udp", k.udp.LocalAddr()}, {"tcp", k.tcp.Addr()}} {
			for {
				err := probe(nw.net, nw.addr.String())
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("dnsserver: %s %s did not answer within %s: %v", nw.net, nw.addr, readyTimeout, err)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(20 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

func probe(network, addr string) error {
	c, err := net.DialTimeout(network, addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	id := uint16(rand.Uint32())
	// header: opcode 3 (unassigned), one question: ". IN SOA"
	msg := []byte{byte(id >> 8), byte(id), 3 << 3, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 1}
	if network == "tcp" {
		msg = append([]byte{0, byte(len(msg))}, msg...)
	}
	if _, err := c.Write(msg); err != nil {
		return err
	}
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		return err
	}
	if network == "tcp" {
		if n < 2 {
			return fmt.Errorf("short answer")
		}
		buf, n = buf[2:], n-2
	}
	if n < headerLen || binary.BigEndian.Uint16(buf) != id {
		return fmt.Errorf("unexpected answer")
	}
	return nil
}
