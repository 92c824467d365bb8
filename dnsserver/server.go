package dnsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"

	"github.com/kumadp/kuma-dp/authdns"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// Timeouts of the lifecycle.
const (
	readyTimeout = 5 * time.Second  // every listener must answer a probe within this
	stopTimeout  = 10 * time.Second // every serve loop must have returned within this
)

// Server is the resolver: create it with New, give it tables with Swap, serve with Run.
type Server struct {
	cfg      normalized
	id       string
	corefile string
	resp     responder
	routes   atomic.Pointer[authdns.Catalog] // the route zones (routezones.go)
	zones    routeZones
	met      *metrics
	log      *slog.Logger
	ready    chan struct{}
	ran      atomic.Bool

	mu       sync.Mutex
	captured []capturedBlock // from kumavip's setup, during caddy.Start
	cctx     caddy.Context
	udp, tcp []net.Addr
}

type capturedBlock struct {
	cfg   *dnsserver.Config
	hosts []string
}

// New validates cfg and prepares the server; it binds nothing (Run does). Errors name the
// field and the value.
func New(cfg Config) (*Server, error) {
	if err := registerPlugin(); err != nil {
		return nil, fmt.Errorf("dnsserver: registering the kumavip plugin: %w", err)
	}
	n, err := normalize(cfg)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: n, id: newID(), met: newMetrics(), log: n.logger, ready: make(chan struct{})}
	s.resp.ttl = n.ttl
	s.resp.search = n.search
	s.corefile, err = renderCorefile(n.template, corefileData(s.id, n))
	if err != nil {
		return nil, err
	}
	s.resp.cur.Store(newView(nil))
	return s, nil
}

// Corefile is the Corefile Run starts CoreDNS with.
func (s *Server) Corefile() string { return s.corefile }

// Swap makes t the table every following query is answered from, in one atomic store: no
// query sees half of an update. It does not copy or index t (O(1)); t must not change
// afterwards (Tables are immutable).
func (s *Server) Swap(t *vipalloc.Table) {
	s.resp.cur.Store(newView(t))
	s.met.entries.Set(float64(t.Len()))
	s.met.swaps.Inc()
	s.log.Debug("table swapped", "hostnames", t.Len(), "hash", t.Hash())
}

// Ready is closed once every listener (UDP and TCP) has answered a probe.
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Addrs are the bound addresses (a port 0 in Config.Addrs reads back as the real port).
// Valid after Ready.
func (s *Server) Addrs() (udp, tcp []net.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]net.Addr(nil), s.udp...), append([]net.Addr(nil), s.tcp...)
}

// MetricsHandler serves the resolver's metrics (kuma_dp_dns_*) and CoreDNS's (coredns_*)
// in the Prometheus text format.
func (s *Server) MetricsHandler() http.Handler { return s.met.handler() }

func (s *Server) counted(kind answerKind, qtype uint16) {
	s.met.answer(srcLocal, qtype)
	if kind == truncated {
		s.met.truncated.Inc()
	}
}

// capture is called by kumavip's setup for each server block: it records where the block
// listens and clears it, so caddy.Start binds nothing and Run can bind itself.
func (s *Server) capture(cfg *dnsserver.Config, cctx caddy.Context) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.captured = append(s.captured, capturedBlock{cfg: cfg, hosts: cfg.ListenHosts})
	cfg.ListenHosts = nil
	s.cctx = cctx
}

// caddyMu serializes caddy.Start: Caddy's bookkeeping is process-global.
var caddyMu sync.Mutex

// Run starts CoreDNS, binds and serves every listen address, closes Ready once each
// listener answers, and serves until ctx is cancelled; then it stops everything it
// started (the forward plugin's idle connection goroutines end at the next GC).
func (s *Server) Run(ctx context.Context) error {
	if !s.ran.CompareAndSwap(false, true) {
		return errors.New("dnsserver: Run called twice")
	}
	defer s.register()()
	core, err := s.startCoreDNS()
	if err != nil {
		return err
	}
	defer core.stop()
	servers, err := s.makeServers()
	if err != nil {
		return err
	}
	socks, err := s.bindAll(servers)
	if err != nil {
		return err
	}
	loops := serveAll(s, socks)
	if err := s.probeAll(ctx, socks); err != nil {
		if ctx.Err() != nil { // cancelled while starting: a clean stop
			return loops.shutdown(core)
		}
		return errors.Join(err, loops.shutdown(core))
	}
	close(s.ready)
	s.log.Info("DNS resolver ready", "udp", addrList(s.udp), "tcp", addrList(s.tcp),
		"upstreams", s.cfg.upstreams, "search", s.cfg.search)
	select {
	case <-ctx.Done():
		return loops.shutdown(core)
	case err := <-loops.failed:
		return errors.Join(fmt.Errorf("dnsserver: serving: %w", err), loops.shutdown(core))
	}
}

// register lets kumavip's setup find s by its id while Run runs; it returns the removal.
func (s *Server) register() (unregister func()) {
	registryMu.Lock()
	registry[s.id] = s
	registryMu.Unlock()
	return func() {
		registryMu.Lock()
		delete(registry, s.id)
		registryMu.Unlock()
	}
}

// coreDNS is the started Caddy instance: its servers are built and served by Run, its
// shutdown callbacks run once.
type coreDNS struct {
	inst          *caddy.Instance
	callbacksDone bool
	log           *slog.Logger
}

// startCoreDNS runs the Corefile through caddy.Start (kumavip's setup withholds the listen
// hosts, so it binds nothing).
func (s *Server) startCoreDNS() (*coreDNS, error) {
	caddyMu.Lock()
	inst, err := caddy.Start(caddy.CaddyfileInput{Contents: []byte(s.corefile), Filepath: "kuma-dp Corefile", ServerTypeName: "dns"})
	caddyMu.Unlock()
	if err != nil {
		if inst != nil {
			inst.ShutdownCallbacks()
			inst.Stop()
		}
		return nil, fmt.Errorf("dnsserver: starting CoreDNS: %w", err)
	}
	return &coreDNS{inst: inst, log: s.log}, nil
}

// runCallbacks runs the plugins' shutdown callbacks, once.
func (c *coreDNS) runCallbacks() {
	if c.callbacksDone {
		return
	}
	c.callbacksDone = true
	for _, err := range c.inst.ShutdownCallbacks() {
		c.log.Warn("CoreDNS shutdown callback", "error", err)
	}
}

// stop runs the callbacks (if shutdown did not) and takes the instance off Caddy's list
// (it has no servers of its own).
func (c *coreDNS) stop() {
	c.runCallbacks()
	c.inst.Stop()
}

// serving is the serve loops of every socket: UDP through the fast path, TCP straight to
// CoreDNS.
type serving struct {
	socks    []socketPair
	wg       sync.WaitGroup
	stopping atomic.Bool
	failed   chan error // a loop that ended before shutdown
}

func serveAll(s *Server, socks []socketPair) *serving {
	l := &serving{socks: socks, failed: make(chan error, 2*len(socks))}
	for _, k := range socks {
		for _, serve := range []func() error{
			func() error { return k.srv.ServePacket(&fastConn{UDPConn: k.udp, s: s}) },
			func() error { return k.srv.Serve(optListener{k.tcp}) },
		} {
			l.wg.Go(func() {
				if err := serve(); err != nil && !l.stopping.Load() {
					l.failed <- err
				}
			})
		}
	}
	return l
}

// shutdown stops as CoreDNS does - callbacks, then Stop, then wait - and closes the sockets,
// which ends loops Stop could not reach (not started yet); it waits for every loop, at most
// stopTimeout.
func (l *serving) shutdown(core *coreDNS) error {
	l.stopping.Store(true)
	core.runCallbacks()
	var sw sync.WaitGroup
	for _, k := range l.socks {
		sw.Go(func() { k.srv.Stop() })
	}
	sw.Wait()
	for _, k := range l.socks {
		k.udp.Close()
		k.tcp.Close()
	}
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("dnsserver: serve loops still running %s after stop", stopTimeout)
	}
}

// makeServers gives the withheld listen hosts back and builds the servers with CoreDNS's
// own grouping (one *dnsserver.Server per address).
func (s *Server) makeServers() ([]*dnsserver.Server, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cctx == nil || len(s.captured) == 0 {
		return nil, errors.New("dnsserver: the Corefile did not load the kumavip plugin")
	}
	for _, c := range s.captured {
		c.cfg.ListenHosts = c.hosts
	}
	list, err := s.cctx.MakeServers()
	if err != nil {
		return nil, fmt.Errorf("dnsserver: building CoreDNS servers: %w", err)
	}
	var out []*dnsserver.Server
	for _, cs := range list {
		ds, ok := cs.(*dnsserver.Server)
		if !ok {
			return nil, fmt.Errorf("dnsserver: server %T: only plain DNS servers are supported", cs)
		}
		out = append(out, ds)
	}
	return out, nil
}

type socketPair struct {
	srv *dnsserver.Server
	udp *net.UDPConn
	tcp *net.TCPListener
}

func (s *Server) bindAll(servers []*dnsserver.Server) ([]socketPair, error) {
	var socks []socketPair
	fail := func(err error) ([]socketPair, error) {
		for _, k := range socks {
			k.udp.Close()
			k.tcp.Close()
		}
		return nil, err
	}
	for _, srv := range servers {
		ap, err := listenAddr(srv.Address())
		if err != nil {
			return fail(fmt.Errorf("dnsserver: addrs: %w", err))
		}
		u, t, err := bindPair(ap)
		if err != nil {
			return fail(fmt.Errorf("dnsserver: addrs %q: %w", ap.String(), err))
		}
		socks = append(socks, socketPair{srv: srv, udp: u, tcp: t})
	}
	s.mu.Lock()
	for _, k := range socks {
		s.udp = append(s.udp, k.udp.LocalAddr())
		s.tcp = append(s.tcp, k.tcp.Addr())
	}
	s.mu.Unlock()
	return socks, nil
}

func addrList(as []net.Addr) string {
	var b strings.Builder
	for i, a := range as {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(a.String())
	}
	return b.String()
}

// bindPair binds UDP and TCP on the same address and port. For port 0 it takes UDP's free
// port for TCP too (retrying when TCP's side of that port is taken). No SO_REUSEPORT: two
// resolvers on one port would silently split the queries.
func bindPair(ap netip.AddrPort) (*net.UDPConn, *net.TCPListener, error) {
	for attempt := 0; ; attempt++ {
		u, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(ap))
		if err != nil {
			return nil, nil, err
		}
		port := u.LocalAddr().(*net.UDPAddr).AddrPort().Port()
		t, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(netip.AddrPortFrom(ap.Addr(), port)))
		if err == nil {
			return u, t, nil
		}
		u.Close()
		if ap.Port() != 0 || attempt >= 20 {
			return nil, nil, err
		}
	}
}
