package authdns

import (
	"net"
)

// fastConn is the UDP socket as the miekg/dns server sees it. Its ReadFrom answers the
// queries the prepared form takes (Catalog.AppendAnswer) right here - one read, one write,
// no message built, no goroutine, nothing allocated - and hands only the other packets
// (transfers, TSIG, ANY, malformed, truncated answers) to the server's full path.
//
// ReadFrom is called by one goroutine only (the server's read loop), which owns out.
type fastConn struct {
	*net.UDPConn
	s   *Server
	out []byte
}

func (c *fastConn) ReadFrom(b []byte) (int, net.Addr, error) {
	if c.out == nil {
		c.out = make([]byte, 0, 2048)
	}
	for {
		n, from, err := c.UDPConn.ReadFromUDPAddrPort(b)
		if err != nil {
			return n, nil, err
		}
		resp, rcode, ok := c.s.cat.Load().AppendAnswer(c.out[:0], b[:n], true)
		if !ok {
			return n, net.UDPAddrFromAddrPort(from), nil
		}
		c.out = resp[:0]
		c.s.Queries[min(rcode, len(c.s.Queries)-1)].Add(1)
		c.UDPConn.WriteToUDPAddrPort(resp, from) // UDP: a lost answer is retried by the client
	}
}
