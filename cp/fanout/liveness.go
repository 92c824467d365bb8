package fanout

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/internal/errtext"
)

// An agent's liveness is read from its connection, not from whether gRPC still holds it.
// gRPC pings a connection silent for AgentKeepalive; a healthy agent answers at once, so
// one not heard from for twice that is frozen, cut off or starved: it stops counting as
// holding a stream (HasAgent, AgentNames: a gateway replica leaves its router's answers)
// within seconds, and counts again from its next answer. Its connection is closed only
// when the ping goes unanswered for AgentDropAfter, so an agent that answers late (its
// process or this one short of CPU in a reconnect storm) keeps its stream and its model,
// instead of reconnecting and asking for the whole mesh again.

// AgentDropAfter is how long a ping may wait for its answer before gRPC closes the
// agent's connection (at least AgentKeepalive).
const AgentDropAfter = 20 * time.Second

// epoch is what heard times are counted from (the monotonic clock).
var epoch = time.Now()

func sinceEpoch() int64 { return int64(time.Since(epoch)) }

// heardConn is an agent's connection, with when anything was last read from it (its
// reads: connread.go).
type heardConn struct {
	net.Conn
	raw   syscall.RawConn // the socket's, when it has one
	heard atomic.Int64    // sinceEpoch of the last read that returned data
	l     *heardListener
	once  sync.Once
	// what a read took from the socket and the next have not (one reader at a time)
	chunk   *[]byte
	r, w    int
	readErr error
}

func (c *heardConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c.RemoteAddr().String())
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// heardListener hands out heardConns and finds them again by the peer's address (a
// stream's peer.Addr).
type heardListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*heardConn
}

func newHeardListener(ln net.Listener) *heardListener {
	return &heardListener{Listener: ln, conns: map[string]*heardConn{}}
}

func (l *heardListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	hc := &heardConn{Conn: c, l: l}
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			hc.raw = raw
		}
	}
	hc.heard.Store(sinceEpoch())
	l.mu.Lock()
	l.conns[c.RemoteAddr().String()] = hc
	l.mu.Unlock()
	return hc, nil
}

// heard is the connection from peer's last heard time, or nil when it is not known.
func (l *heardListener) heard(peer string) *atomic.Int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.conns[peer]; c != nil {
		return &c.heard
	}
	return nil
}

// silentAfter is how long an agent may go unheard before it stops counting as holding a
// stream: twice the keepalive (a ping after one, its answer within the other).
func (cp *ControlPlane) silentAfter() time.Duration { return 2 * cp.agentKeepalive() }

// watchSilence sweeps the streams every quarter keepalive until ctx ends: an agent not
// heard from for silentAfter stops counting as holding a stream, and counts again once
// heard.
func (cp *ControlPlane) watchSilence(ctx context.Context) {
	t := time.NewTicker(cp.agentKeepalive() / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cp.sweepSilence(sinceEpoch())
		}
	}
}

// silenceChange is a stream found silent, or heard again.
type silenceChange struct {
	st     *streamState
	silent bool
}

// sweepSilence marks the streams silent or heard as of now (sinceEpoch).
func (cp *ControlPlane) sweepSilence(now int64) {
	limit := int64(cp.silentAfter())
	var changes []silenceChange
	cp.smu.Lock()
	for _, st := range cp.streams {
		if st.node == nil || st.heard == nil {
			continue
		}
		silent := now-st.heard.Load() > limit
		if silent == st.silent {
			continue
		}
		st.silent = silent
		if silent {
			cp.dropAgentLocked(*st.node)
			cp.silent.Add(1)
		} else {
			cp.addAgentLocked(*st.node)
			cp.silent.Add(-1)
		}
		changes = append(changes, silenceChange{st, silent})
	}
	cp.smu.Unlock()
	cp.logSilence(changes)
}

// logSilence logs a sweep's changes: each at debug level, and one line for the sweep
// (a reconnect storm can leave thousands of agents late at once).
func (cp *ControlPlane) logSilence(changes []silenceChange) {
	if len(changes) == 0 {
		return
	}
	var silent, heard []string
	for _, c := range changes {
		name := c.st.node.Mesh + "/" + c.st.node.Name
		if c.silent {
			silent = append(silent, name)
		} else {
			heard = append(heard, name)
		}
		cp.log.Debug("dataplane silence", "dataplane", c.st.node.Name, "mesh", c.st.node.Mesh, "peer", c.st.peer, "silent", c.silent)
	}
	if len(silent) > 0 {
		cp.log.Warn("dataplanes not answering: their agents no longer count as connected (a gateway leaves its router's answers) until they answer",
			"count", len(silent), "dataplanes", errtext.List(silent, 5), "silent_for", cp.silentAfter())
	}
	if len(heard) > 0 {
		cp.log.Info("dataplanes answering again", "count", len(heard), "dataplanes", errtext.List(heard, 5))
	}
}

// addAgentLocked and dropAgentLocked count a stream of dataplane id in or out of agents
// (under smu).
func (cp *ControlPlane) addAgentLocked(id token.Identity) {
	if cp.agents[id]++; cp.agents[id] == 1 {
		cp.agentsGen++
	}
}

func (cp *ControlPlane) dropAgentLocked(id token.Identity) {
	if cp.agents[id]--; cp.agents[id] <= 0 {
		delete(cp.agents, id)
		cp.agentsGen++
	}
}
