package fanout

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/grpc"

	"github.com/kumadp/kuma-dp/mesh"
)

// stalled dials an agent's connection whose reads wait while gate is held (as SIGSTOP
// holds the agent's process: what arrives is not answered) and whose control plane's
// pings are each handed on delay after they arrived (an agent short of CPU answers late).
func stalled(gate *sync.RWMutex, delay time.Duration) grpc.DialOption {
	return grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &stalledConn{Conn: c, gate: gate, delay: delay}, nil
	})
}

type stalledConn struct {
	net.Conn
	gate  *sync.RWMutex
	delay time.Duration
}

func (c *stalledConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.gate.RLock()
	c.gate.RUnlock()
	if n == 17 && p[3] == 0x6 && p[4]&0x1 == 0 { // one HTTP/2 PING frame, not an ACK
		time.Sleep(c.delay)
	}
	return n, err
}

func keepaliveCP(t *testing.T) (*ControlPlane, string) {
	t.Helper()
	cp := New(nil, slog.New(slog.DiscardHandler))
	cp.AgentKeepalive = time.Second
	cp.Apply(servedN(3, 1))
	return cp, serve(t, cp)
}

// A frozen agent (its connection open, nothing answered) stops counting as connected -
// HasAgent and AgentNames, what a gateway replica's readiness reads - within twice the
// keepalive, but keeps its stream; once it answers again it counts again and is served the
// changes made meanwhile, without reconnecting. (Its connection was closed after twice the
// keepalive: it reconnected and resumed.)
func TestFrozenAgentStopsCountingAndKeepsItsStream(t *testing.T) {
	cp, addr := keepaliveCP(t)
	var gate sync.RWMutex
	a := dialWith(t, addr, &core.Node{Id: "gw", Cluster: "default"}, nil, []grpc.DialOption{stalled(&gate, 0)}, mesh.KindDataplane)
	a.ack(a.recv())
	waitUntil(t, "the agent counted", func() bool { return cp.HasAgent("default", "gw") })

	gate.Lock()
	start := time.Now()
	waitUntil(t, "the frozen agent no longer counted", func() bool { return !cp.HasAgent("default", "gw") })
	t.Logf("a frozen agent stopped counting as connected after %v (keepalive 1 s)", time.Since(start))
	if names := cp.AgentNames(); slices.Contains(names, "default/gw") {
		t.Errorf("AgentNames %v still names the frozen agent", names)
	}
	if n := cp.silent.Load(); n != 1 {
		t.Errorf("kuma_cp_agents_silent %d, want 1", n)
	}
	time.Sleep(time.Second)
	if n := cp.Connected(); n != 1 {
		t.Errorf("%d streams open while the agent is frozen, want its stream kept (1)", n)
	}
	cp.Apply(servedN(4, 1))
	gate.Unlock()
	waitUntil(t, "the agent counted again once it answers", func() bool { return cp.HasAgent("default", "gw") })
	if n := cp.silent.Load(); n != 0 {
		t.Errorf("kuma_cp_agents_silent %d once the agent answers, want 0", n)
	}
	r := a.recv()
	if got := names(r); !slices.Equal(got, []string{"dp-3"}) {
		t.Errorf("after the freeze the stream got %v, want the change made meanwhile (dp-3)", got)
	}
}

// An agent that answers every ping late (1.5 s, with a 1 s keepalive: a process short of
// CPU in a reconnect storm) keeps its stream and is served changes. (Its connection was
// closed when the ping's answer took longer than the keepalive: it reconnected, asking for
// everything again, and was closed again.)
func TestSlowAgentIsNotDropped(t *testing.T) {
	cp, addr := keepaliveCP(t)
	var gate sync.RWMutex
	a := dialWith(t, addr, &core.Node{Id: "slow", Cluster: "default"}, nil, []grpc.DialOption{stalled(&gate, 1500*time.Millisecond)}, mesh.KindDataplane)
	a.ack(a.recv())
	time.Sleep(6 * time.Second) // several pings, each answered late
	if n := cp.Connected(); n != 1 {
		t.Fatalf("%d streams open, want the slow agent's (1): it was dropped", n)
	}
	cp.Apply(servedN(4, 1))
	if got := names(a.recv()); !slices.Equal(got, []string{"dp-3"}) {
		t.Errorf("the slow agent got %v, want dp-3", got)
	}
}

// The listener forgets a connection once it is closed: what it keeps per agent goes with
// the agent.
func TestHeardConnectionsForgotten(t *testing.T) {
	cp, addr := keepaliveCP(t)
	var agents []*agent
	for range 5 {
		a := dial(t, addr, "default", nil, mesh.KindDataplane)
		a.ack(a.recv())
		agents = append(agents, a)
	}
	hl := cp.conns.Load()
	count := func() int {
		hl.mu.Lock()
		defer hl.mu.Unlock()
		return len(hl.conns)
	}
	if n := count(); n != 5 {
		t.Fatalf("%d connections known, want 5", n)
	}
	for _, a := range agents {
		a.close()
	}
	waitUntil(t, "every connection forgotten", func() bool { return count() == 0 && cp.Connected() == 0 })
}
