//go:build linux && (amd64 || arm64)

package dnsserver

import (
	"net"
	"testing"
)

// The batched read and write allocate nothing a datagram (the fast path's promise: answering
// DNS leaves the collector nothing to do).
func TestBatchReadWriteAllocateNothing(t *testing.T) {
	srv, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cl, err := net.Dial("udp", srv.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c := &fastConn{UDPConn: srv}
	if !c.startBatch() {
		t.Skip("no batched reads on this platform")
	}
	ping, buf := []byte("ping"), make([]byte, 16)
	allocs := testing.AllocsPerRun(200, func() {
		cl.Write(ping)
		n, err := c.b.read()
		if err != nil || n != 1 {
			t.Fatalf("read %d datagrams: %v", n, err)
		}
		c.b.queue(0, 0, c.b.in[0][:c.b.hdrs[0].n])
		c.b.write(1)
		cl.Read(buf)
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations a datagram read and answered, want none", allocs)
	}
}
