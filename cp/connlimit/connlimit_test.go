package connlimit

import (
	"net"
	"testing"
	"time"
)

// serve runs l's accept loop, handing the server's side of each connection to the test.
func serve(t *testing.T, lim Limits) (*Listener, chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Wrap(ln, lim)
	t.Cleanup(func() { l.Close() })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	return l, accepted
}

func dial(t *testing.T, l *Listener) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c at once (a read sees EOF, not a timeout).
func closedByServer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, err := c.Read(make([]byte, 1))
	ne, timeout := err.(net.Error)
	return err != nil && !(timeout && ne.Timeout())
}

func TestPerIPLimit(t *testing.T) {
	l, accepted := serve(t, Limits{PerIP: 3})
	var server []net.Conn
	for range 3 {
		dial(t, l)
		server = append(server, <-accepted)
	}
	if !closedByServer(dial(t, l)) {
		t.Fatal("a fourth connection from one IP was held")
	}
	if got := l.Stats.RefusedPerIP.Load(); got != 1 {
		t.Fatalf("RefusedPerIP = %d, want 1", got)
	}
	server[0].Close() // the server ends one: its place is free again
	if got := l.Stats.Open.Load(); got != 2 {
		t.Fatalf("Open = %d after a close, want 2", got)
	}
	server[0].Close() // a second Close frees nothing more
	dial(t, l)
	select {
	case <-accepted:
	case <-time.After(2 * time.Second):
		t.Fatal("the freed place was not given to a new connection")
	}
}

func TestTotalLimit(t *testing.T) {
	l, accepted := serve(t, Limits{Total: 2})
	for range 2 {
		dial(t, l)
		<-accepted
	}
	if !closedByServer(dial(t, l)) {
		t.Fatal("a connection over the total was held")
	}
	if got := l.Stats.RefusedTotal.Load(); got != 1 {
		t.Fatalf("RefusedTotal = %d, want 1", got)
	}
	if got := l.Stats.Accepted.Load(); got != 2 {
		t.Fatalf("Accepted = %d, want 2", got)
	}
}
