// Package connlimit bounds the connections a server holds: in all, per client IP, and (with
// the server's own handshake deadline) how long a connection may stay without finishing its
// handshake. It owns the listener wrapper and its counters, the control plane's HTTP ports
// (a limited listener and a server with header and idle timeouts: http.go) and how the
// open-files limit is shared between the ports (Share); it never reads what flows on a
// connection.
package connlimit

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// Limits of a Listener; zero means no limit.
type Limits struct {
	Total int // connections open at once
	PerIP int // connections open at once from one client IP
}

// Stats are the listener's counters, read at any time.
type Stats struct {
	Accepted       atomic.Uint64 // connections handed to the server
	RefusedTotal   atomic.Uint64 // closed at once: Total reached
	RefusedPerIP   atomic.Uint64 // closed at once: PerIP reached for the client's IP
	Open           atomic.Int64  // connections open now
	HandshakeFails atomic.Uint64 // counted by the server (TLS failures and timeouts)
}

// Listener is a net.Listener that closes, at once, connections over its limits.
type Listener struct {
	net.Listener
	lim   Limits
	Stats *Stats

	mu    sync.Mutex
	total int
	perIP map[netip.Addr]int
}

// Wrap returns ln limited by lim.
func Wrap(ln net.Listener, lim Limits) *Listener {
	return &Listener{Listener: ln, lim: lim, Stats: &Stats{}, perIP: map[netip.Addr]int{}}
}

// Accept returns the next connection within the limits; those over them are closed and
// counted, and Accept waits for the next one.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		l.mu.Lock()
		switch {
		case l.lim.Total > 0 && l.total >= l.lim.Total:
			l.mu.Unlock()
			l.Stats.RefusedTotal.Add(1)
			c.Close()
			continue
		case l.lim.PerIP > 0 && l.perIP[ip] >= l.lim.PerIP:
			l.mu.Unlock()
			l.Stats.RefusedPerIP.Add(1)
			c.Close()
			continue
		}
		l.total++
		l.perIP[ip]++
		l.mu.Unlock()
		l.Stats.Accepted.Add(1)
		l.Stats.Open.Add(1)
		return &conn{Conn: c, l: l, ip: ip}, nil
	}
}

func (l *Listener) release(ip netip.Addr) {
	l.mu.Lock()
	l.total--
	if l.perIP[ip]--; l.perIP[ip] <= 0 {
		delete(l.perIP, ip)
	}
	l.mu.Unlock()
	l.Stats.Open.Add(-1)
}

func remoteIP(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// conn releases its place once, at its first Close.
type conn struct {
	net.Conn
	l    *Listener
	ip   netip.Addr
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.ip) })
	return err
}

// SyscallConn is the connection's own (a *net.TCPConn's), so that a reader above it can wait
// for data without holding a buffer; errors.ErrUnsupported when it has none.
func (c *conn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, errors.ErrUnsupported
}

// Collectors are the listener's counters as Prometheus metrics named <prefix>_connections_*
// and <prefix>_handshake_failures_total.
func (l *Listener) Collectors(prefix string) []prometheus.Collector {
	return append(l.connCollectors(prefix), counter(prefix+"_handshake_failures_total",
		"TLS handshakes that failed or did not finish within the handshake timeout.", &l.Stats.HandshakeFails, nil))
}

// connCollectors are the counters of the connections: <prefix>_connections_*.
func (l *Listener) connCollectors(prefix string) []prometheus.Collector {
	return []prometheus.Collector{
		counter(prefix+"_connections_accepted_total", "Connections accepted within the limits.", &l.Stats.Accepted, nil),
		counter(prefix+"_connections_refused_total", "Connections closed at once because a limit was reached, by limit.", &l.Stats.RefusedTotal, prometheus.Labels{"limit": "total"}),
		counter(prefix+"_connections_refused_total", "Connections closed at once because a limit was reached, by limit.", &l.Stats.RefusedPerIP, prometheus.Labels{"limit": "per_ip"}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: prefix + "_connections_open", Help: "Connections open now."},
			func() float64 { return float64(l.Stats.Open.Load()) }),
	}
}

func counter(name, help string, v *atomic.Uint64, labels prometheus.Labels) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
		func() float64 { return float64(v.Load()) })
}
