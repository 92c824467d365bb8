package fanout

import (
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"

	"github.com/kumadp/kuma-dp/cp/connlimit"
	"github.com/kumadp/kuma-dp/mesh"
)

// An idle agent's connection costs the control plane little: no read or write buffer is
// held while it is silent (a read buffer of 8 KiB was, on every connection), so what the
// server's side of the link keeps per agent (its transport, stream and subscriptions) stays
// within 15 KiB of heap, with one goroutine of its own (11.5 KiB here; 20 KiB with the read buffer). Measured exactly: every allocation profiled, and only those
// still in use made by the server's transport or the stream's handler counted.
func TestIdleAgentCost(t *testing.T) {
	old := runtime.MemProfileRate
	runtime.MemProfileRate = 1
	defer func() { runtime.MemProfileRate = old }()
	cp := New(nil, slog.New(slog.DiscardHandler))
	cp.Apply(servedN(3, 1))
	// Served as kuma-cp serves it: through the connection limits' listener, whose
	// connections are not the *net.TCPConn gRPC reads without a buffer of its own.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := serveOn(t, cp, connlimit.Wrap(ln, connlimit.Limits{}))
	const n = 50
	var agents []*agent
	for range n {
		a := dial(t, addr, "default", nil, mesh.KindDataplane)
		a.ack(a.recv())
		agents = append(agents, a)
	}
	waitUntil(t, "every agent connected", func() bool { return cp.Connected() == n })
	hl := cp.conns.Load()
	hl.mu.Lock()
	for peer, c := range hl.conns {
		if c.raw == nil { // connlimit's connection hides its socket: gRPC's reads go one by one
			t.Errorf("agent %s's connection is read without waiting on its socket (connlimit's SyscallConn?)", peer)
		}
	}
	hl.mu.Unlock()
	if g := fanoutGoroutines(); g != n {
		t.Errorf("%d goroutines in cp/fanout for %d idle agents, want one each (the handler's, waiting for the agent's requests)", g, n)
	}
	perAgent := serverInUse() / n
	t.Logf("the server's side of the link holds %d B per idle agent", perAgent)
	if perAgent > 15<<10 {
		t.Errorf("the server holds %d B per idle agent, want at most 15 KiB (a buffer held while the agent is silent?)", perAgent)
	}
	runtime.KeepAlive(agents)
}

// serverInUse is the bytes in use, as of two collections from now, allocated under the
// gRPC server's transport or handlers (not the test's clients).
func serverInUse() int64 {
	runtime.GC()
	runtime.GC()
	var recs []runtime.MemProfileRecord
	for {
		k, ok := runtime.MemProfile(recs, false)
		if ok {
			recs = recs[:k]
			break
		}
		recs = make([]runtime.MemProfileRecord, k+100)
	}
	var sum int64
	for _, r := range recs {
		frames := runtime.CallersFrames(r.Stack())
		for {
			f, more := frames.Next()
			if strings.Contains(f.Function, "transport.NewServerTransport") || strings.Contains(f.Function, "grpc.(*Server).") ||
				strings.Contains(f.Function, "transport.(*http2Server)") {
				sum += r.InUseBytes()
				break
			}
			if !more {
				break
			}
		}
	}
	return sum
}

// fanoutGoroutines counts the goroutines running the link's streams (the test's agents'
// goroutines, in this package's tests, apart).
func fanoutGoroutines() int {
	buf := make([]byte, 16<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "kuma-dp/cp/fanout.ads.") || strings.Contains(g, "kuma-dp/cp/fanout.(*stream).") {
			n++
		}
	}
	return n
}
