package dnsserver

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"time"
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
	out []byte
}

func (c *fastConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if c.out == nil {
		c.out = make([]byte, 0, 1024)
	}
	for {
		n, from, err := c.UDPConn.ReadFromUDPAddrPort(b)
		if err != nil {
			return n, nil, err
		}
		var q query
		if parseQuery(b[:n], &q) {
			resp, kind := c.s.resp.answer(&q, c.out[:0], q.limit())
			c.out = resp[:0]
			if kind != notOurs {
				c.s.counted(kind, q.qtype)
				c.UDPConn.WriteToUDPAddrPort(resp, from) // UDP: a lost answer is retried by the client
				continue
			}
		}
		if resp, ok := c.s.answerRoute(c.out[:0], b[:n]); ok { // routezones.go
			c.out = resp[:0]
			c.UDPConn.WriteToUDPAddrPort(resp, from)
			continue
		}
		return n, net.UDPAddrFromAddrPort(from), nil
	}
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
