package authdns

import (
	"net"

	"golang.org/x/net/ipv4"
)

// batch is how many datagrams one read (recvmmsg) and one write (sendmmsg) move at most.
const batch = 32

// fastConn is the UDP socket as the miekg/dns server sees it. Its ReadFrom reads the
// datagrams waiting (up to batch, one system call), answers those the prepared form takes
// (Catalog.AppendAnswer) - no message built, no goroutine, the answers written together in
// one system call - and hands only the others (transfers, TSIG, ANY, malformed, answers that
// need truncating) to the server's full path, one per call.
//
// ReadFrom is called by one goroutine only (the server's read loop), which owns the buffers.
type fastConn struct {
	*net.UDPConn
	s       *Server
	pc      *ipv4.PacketConn
	in, out []ipv4.Message
	outBufs [][]byte
	pending []int // indexes of in left to the full path, returned in order
}

func newFastConn(c *net.UDPConn, s *Server) *fastConn {
	f := &fastConn{UDPConn: c, s: s, pc: ipv4.NewPacketConn(c),
		in: make([]ipv4.Message, batch), out: make([]ipv4.Message, batch), outBufs: make([][]byte, batch)}
	for i := range f.in {
		f.in[i].Buffers = [][]byte{make([]byte, 65535)}
		f.outBufs[i] = make([]byte, 0, 2048)
		f.out[i].Buffers = make([][]byte, 1)
	}
	return f
}

func (c *fastConn) ReadFrom(b []byte) (int, net.Addr, error) {
	for {
		if len(c.pending) > 0 {
			m := &c.in[c.pending[0]]
			c.pending = c.pending[1:]
			return copy(b, m.Buffers[0][:m.N]), m.Addr, nil
		}
		n, err := c.pc.ReadBatch(c.in, 0)
		if err != nil {
			return 0, nil, err
		}
		cat := c.s.cat.Load()
		k := 0
		for i := range n {
			m := &c.in[i]
			resp, rcode, ok := cat.AppendAnswer(c.outBufs[k][:0], m.Buffers[0][:m.N], true)
			if !ok {
				c.pending = append(c.pending, i)
				continue
			}
			c.outBufs[k] = resp[:0]
			c.out[k].Buffers[0], c.out[k].Addr = resp, m.Addr
			c.s.Queries[min(rcode, len(c.s.Queries)-1)].Add(1)
			k++
		}
		for sent := 0; sent < k; { // UDP: a lost answer is retried by the client
			w, err := c.pc.WriteBatch(c.out[sent:k], 0)
			if err != nil || w == 0 {
				break
			}
			sent += w
		}
	}
}
