package etcdtest

import (
	"net"
	"sync"
	"testing"
)

// Relay forwards TCP connections from its own loopback address to a member's client URL.
// Pause makes it stop forwarding in both directions without closing anything - what a
// network partition looks like to both ends: requests and keepalives go unanswered,
// no connection is reset - and Resume delivers what was held and forwards again.
type Relay struct {
	URL    string // http://<the relay's address>, to give a client as the member's endpoint
	target string
	mu     sync.Mutex
	paused bool
	resume *sync.Cond
}

// Relay starts a relay in front of member i, closed at the end of the test.
func (c *Cluster) Relay(i int) *Relay {
	c.t.Helper()
	return newRelay(c.t, c.Members[i].ClientURL[len("http://"):])
}

// Relays is a relay in front of each member.
func (c *Cluster) Relays() []*Relay {
	c.t.Helper()
	out := make([]*Relay, len(c.Members))
	for i := range c.Members {
		out[i] = c.Relay(i)
	}
	return out
}

// URLs are the relays' URLs, to give a client as its endpoints.
func URLs(rs []*Relay) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.URL
	}
	return out
}

func newRelay(t testing.TB, target string) *Relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &Relay{URL: "http://" + ln.Addr().String(), target: target}
	r.resume = sync.NewCond(&r.mu)
	var mu sync.Mutex
	var conns []net.Conn
	done := false
	t.Cleanup(func() {
		ln.Close()
		r.Resume()
		mu.Lock()
		done = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			mu.Lock()
			if done {
				in.Close()
				out.Close()
			}
			conns = append(conns, in, out)
			mu.Unlock()
			go r.pipe(out, in)
			go r.pipe(in, out)
		}
	}()
	return r
}

// pipe copies from src to dst, holding each chunk while the relay is paused.
func (r *Relay) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			for r.paused {
				r.resume.Wait()
			}
			r.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // EOF or closed: dst is closed in turn
			return
		}
	}
}

// Pause stops forwarding: bytes read are held, nothing is closed.
func (r *Relay) Pause() {
	r.mu.Lock()
	r.paused = true
	r.mu.Unlock()
}

// Resume forwards again, what was held first.
func (r *Relay) Resume() {
	r.mu.Lock()
	r.paused = false
	r.mu.Unlock()
	r.resume.Broadcast()
}
