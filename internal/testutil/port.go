package testutil

import (
	"fmt"
	"net"
	"testing"
)

// FreeDNSPort is a port free for both UDP and TCP on 127.0.0.1, for a server that cannot
// listen on port 0 and report its port back (nsd). Read back whatever can be read back
// instead: this one can race with another process taking the port.
func FreeDNSPort(t testing.TB) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			pc.Close()
			return port
		}
	}
	t.Fatal("no port free for both UDP and TCP on 127.0.0.1")
	return 0
}
