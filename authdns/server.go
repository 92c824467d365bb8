package authdns

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// Config of a Server.
type Config struct {
	// Address to listen on, UDP and TCP ("127.0.0.1:5653"; port 0 picks one, Addrs tells).
	Address string
	// TransferFrom are the networks allowed to transfer zones (AXFR/IXFR) without TSIG.
	TransferFrom []netip.Prefix
	// TSIG keys (name -> base64 secret, HMAC-SHA256) that allow transfers from anywhere.
	TSIG map[string]string
	// Secondaries get a NOTIFY for each zone whose serial changed ("192.0.2.1:53").
	Secondaries []string
	// NotifyKey names the TSIG key (of TSIG) that signs NOTIFY messages; "" sends them
	// unsigned.
	NotifyKey string
	// NotifyTimeout bounds one NOTIFY attempt; each is tried 5 times. Default 2 s.
	NotifyTimeout time.Duration
	// NotifyRetry is the wait before the first retry of an unacknowledged NOTIFY, doubled
	// before each next one (RFC 1996 3.6). Default 2 s.
	NotifyRetry time.Duration
	Log         *slog.Logger
}

// Server serves a Catalog authoritatively over UDP and TCP. Swap replaces the catalog.
type Server struct {
	cfg     Config
	log     *slog.Logger
	cat     atomic.Pointer[Catalog]
	udp     *dns.Server
	tcp     *dns.Server
	addrs   []net.Addr
	notifyq chan []*Zone
	wg      sync.WaitGroup
	keys    tsigKeys

	// Queries counts answers by response code, for metrics.
	Queries [dns.RcodeBadCookie + 1]atomic.Uint64
	// Transfers and Refused count zone transfers served and refused.
	Transfers, TransfersRefused atomic.Uint64
}

// New binds the listeners (UDP and TCP on the same port) and returns the server; Run serves.
func New(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.NotifyTimeout == 0 {
		cfg.NotifyTimeout = 2 * time.Second
	}
	if cfg.NotifyRetry == 0 {
		cfg.NotifyRetry = 2 * time.Second
	}
	if _, ok := cfg.TSIG[cfg.NotifyKey]; cfg.NotifyKey != "" && !ok {
		return nil, fmt.Errorf("authdns: notify key %q is not one of the TSIG keys", cfg.NotifyKey)
	}
	for name, secret := range cfg.TSIG {
		if _, err := fromBase64(secret); err != nil {
			return nil, fmt.Errorf("authdns: tsig key %q: secret is not base64: %v", name, err)
		}
	}
	s := &Server{cfg: cfg, log: cfg.Log, notifyq: make(chan []*Zone, 16), keys: tsigKeys{}}
	for name, secret := range cfg.TSIG {
		s.keys[strings.ToLower(dns.Fqdn(name))] = secret
	}
	s.cat.Store(&Catalog{zones: map[string]*Zone{}})
	if err := s.listen(); err != nil {
		return nil, err
	}
	return s, nil
}

// listen binds TCP first, then UDP on the port TCP got, retrying when a port 0 choice is
// taken for UDP.
func (s *Server) listen() error {
	var lastErr error
	for range 10 {
		tl, err := net.Listen("tcp", s.cfg.Address)
		if err != nil {
			return fmt.Errorf("authdns: --dns-address %s: %w", s.cfg.Address, err)
		}
		pc, err := net.ListenPacket("udp", tl.Addr().String())
		if err != nil {
			tl.Close()
			lastErr = err
			if _, port, _ := net.SplitHostPort(s.cfg.Address); port == "0" {
				continue
			}
			return fmt.Errorf("authdns: --dns-address %s (udp): %w", s.cfg.Address, err)
		}
		h := dns.HandlerFunc(s.serveDNS)
		s.tcp = &dns.Server{Listener: tl, Handler: h, TsigProvider: s.keys, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second}
		s.udp = &dns.Server{PacketConn: newFastConn(pc.(*net.UDPConn), s), Handler: h, TsigProvider: s.keys, UDPSize: ednsSize}
		s.addrs = []net.Addr{pc.LocalAddr(), tl.Addr()}
		return nil
	}
	return fmt.Errorf("authdns: --dns-address %s: no port free for UDP and TCP: %w", s.cfg.Address, lastErr)
}

// Addrs returns the bound UDP and TCP addresses.
func (s *Server) Addrs() (udp, tcp net.Addr) { return s.addrs[0], s.addrs[1] }

// Catalog returns the catalog being served.
func (s *Server) Catalog() *Catalog { return s.cat.Load() }

// Swap serves cat from now on and sends NOTIFY for each zone whose serial changed.
func (s *Server) Swap(cat *Catalog) {
	old := s.cat.Swap(cat)
	var changed []*Zone
	for o, z := range cat.zones {
		if oz := old.zones[o]; oz == nil || oz.Serial() != z.Serial() {
			changed = append(changed, z)
		}
	}
	if len(changed) > 0 && len(s.cfg.Secondaries) > 0 {
		select {
		case s.notifyq <- changed:
		default:
			s.log.Warn("authdns: NOTIFY queue full; secondaries will see the change at their refresh")
		}
	}
}

// Run serves until ctx is cancelled.
func (s *Server) Run(ctx context.Context) error {
	errc := make(chan error, 2)
	for _, srv := range []*dns.Server{s.udp, s.tcp} {
		go func() { errc <- srv.ActivateAndServe() }()
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.notifier(ctx) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.udp.ShutdownContext(sctx)
	s.tcp.ShutdownContext(sctx)
	s.wg.Wait()
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("authdns: %w", err)
	}
	return nil
}

func (s *Server) serveDNS(w dns.ResponseWriter, req *dns.Msg) {
	if req.Response {
		return // never answer an answer
	}
	if t := req.IsTsig(); t != nil && w.TsigStatus() != nil {
		s.refuseTSIG(w, req, t, w.TsigStatus())
		return
	}
	var resp *dns.Msg
	if len(req.Question) == 1 && req.Opcode == dns.OpcodeQuery &&
		(req.Question[0].Qtype == dns.TypeAXFR || req.Question[0].Qtype == dns.TypeIXFR) {
		if resp = s.transfer(w, req, s.cat.Load()); resp == nil {
			return // the transfer wrote its own envelopes
		}
	} else {
		resp = s.cat.Load().Reply(req, w.RemoteAddr().Network() == "tcp")
	}
	s.Queries[min(resp.Rcode, len(s.Queries)-1)].Add(1)
	if req.IsTsig() != nil && w.TsigStatus() == nil {
		t := req.IsTsig()
		resp.SetTsig(t.Hdr.Name, t.Algorithm, 300, time.Now().Unix())
	}
	if err := w.WriteMsg(resp); err != nil {
		s.log.Debug("authdns: write", "remote", w.RemoteAddr().String(), "error", err)
	}
}

// transfer serves AXFR, and IXFR with the whole zone (RFC 1995 4 allows it), to an allowed
// client over TCP. Over UDP, an IXFR gets the current SOA (the client then asks over TCP)
// and an AXFR is refused.
func (s *Server) transfer(w dns.ResponseWriter, req *dns.Msg, cat *Catalog) *dns.Msg {
	q := req.Question[0]
	z := cat.zones[strings.ToLower(q.Name)]
	m := new(dns.Msg)
	if z == nil {
		m.SetRcode(req, dns.RcodeNotAuth)
		return m
	}
	if !s.transferAllowed(w, req) {
		s.TransfersRefused.Add(1)
		s.log.Info("authdns: zone transfer refused", "zone", z.Origin, "remote", w.RemoteAddr().String())
		m.SetRcode(req, dns.RcodeRefused)
		return m
	}
	if w.RemoteAddr().Network() != "tcp" {
		if q.Qtype == dns.TypeIXFR {
			m.SetReply(req)
			m.Authoritative = true
			m.Answer = []dns.RR{z.SOA}
			return m
		}
		m.SetRcode(req, dns.RcodeRefused)
		return m
	}
	s.Transfers.Add(1)
	recs := append(z.Records(), z.SOA)
	ch := make(chan *dns.Envelope)
	tr := &dns.Transfer{TsigProvider: s.keys}
	errc := make(chan error, 1)
	go func() { errc <- tr.Out(w, req, ch) }()
	const perEnvelope = 100
	for i := 0; i < len(recs); i += perEnvelope {
		ch <- &dns.Envelope{RR: recs[i:min(i+perEnvelope, len(recs))]}
	}
	close(ch)
	if err := <-errc; err != nil {
		s.log.Info("authdns: zone transfer", "zone", z.Origin, "remote", w.RemoteAddr().String(), "error", err)
	}
	w.Hijack()
	w.Close()
	return nil
}

func (s *Server) transferAllowed(w dns.ResponseWriter, req *dns.Msg) bool {
	if req.IsTsig() != nil {
		return w.TsigStatus() == nil
	}
	ap, err := netip.ParseAddrPort(w.RemoteAddr().String())
	if err != nil {
		return false
	}
	for _, p := range s.cfg.TransferFrom {
		if p.Contains(ap.Addr().Unmap()) {
			return true
		}
	}
	return false
}

// notifier sends NOTIFY for changed zones to every secondary, each (zone, secondary) on its
// own, retrying up to 5 times at growing intervals until the secondary acknowledges (RFC
// 1996); a newer serial of the zone replaces the retries of an older one.
func (s *Server) notifier(ctx context.Context) {
	var mu sync.Mutex
	pending := map[string]context.CancelFunc{} // zone + secondary -> its retries
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case zones := <-s.notifyq:
			for _, z := range zones {
				for _, sec := range s.cfg.Secondaries {
					key := z.Origin + " " + sec
					nctx, cancel := context.WithCancel(ctx)
					mu.Lock()
					if stop := pending[key]; stop != nil {
						stop()
					}
					pending[key] = cancel
					mu.Unlock()
					wg.Add(1)
					go func() {
						defer wg.Done()
						s.notify(nctx, z, sec)
						mu.Lock()
						if nctx.Err() == nil {
							delete(pending, key)
						}
						mu.Unlock()
						cancel()
					}()
				}
			}
		}
	}
}

func (s *Server) notify(ctx context.Context, z *Zone, addr string) {
	m := new(dns.Msg)
	m.SetNotify(z.Origin)
	m.Authoritative = true
	m.Answer = []dns.RR{z.SOA}
	c := &dns.Client{Timeout: s.cfg.NotifyTimeout, TsigProvider: s.keys}
	if k := s.cfg.NotifyKey; k != "" {
		m.SetTsig(dns.Fqdn(k), dns.HmacSHA256, 300, time.Now().Unix())
	}
	wait := s.cfg.NotifyRetry
	for attempt := range 5 {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			wait *= 2
		}
		if ctx.Err() != nil {
			return
		}
		r, _, err := c.ExchangeContext(ctx, m, addr)
		if err == nil && r.Rcode == dns.RcodeSuccess {
			s.log.Debug("authdns: NOTIFY acknowledged", "zone", z.Origin, "secondary", addr, "serial", z.Serial())
			return
		}
		if err == nil {
			err = fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
		}
		s.log.Warn("authdns: NOTIFY failed", "zone", z.Origin, "secondary", addr, "attempt", attempt+1, "error", err)
	}
}

// tsigKeys are the TSIG keys by name, lower case and fully qualified: a key name is a domain
// name, compared without regard to case (RFC 8945 4.2).
type tsigKeys map[string]string

func (k tsigKeys) secret(t *dns.TSIG) (string, error) {
	secret, ok := k[strings.ToLower(t.Hdr.Name)]
	if !ok {
		return "", dns.ErrSecret
	}
	return secret, nil
}

func (k tsigKeys) Generate(msg []byte, t *dns.TSIG) ([]byte, error) {
	secret, err := k.secret(t)
	if err != nil {
		return nil, err
	}
	return hmacOf(secret, t.Algorithm, msg)
}

func (k tsigKeys) Verify(msg []byte, t *dns.TSIG) error {
	want, err := k.Generate(msg, t)
	if err != nil {
		return err
	}
	got, err := hex.DecodeString(t.MAC)
	if err != nil || !hmac.Equal(got, want) {
		return dns.ErrSig
	}
	return nil
}

func hmacOf(secret, alg string, msg []byte) ([]byte, error) {
	raw, err := fromBase64(secret)
	if err != nil {
		return nil, err
	}
	var h hash.Hash
	switch dns.CanonicalName(alg) {
	case dns.HmacSHA224:
		h = hmac.New(sha256.New224, raw)
	case dns.HmacSHA256:
		h = hmac.New(sha256.New, raw)
	case dns.HmacSHA384:
		h = hmac.New(sha512.New384, raw)
	case dns.HmacSHA512:
		h = hmac.New(sha512.New, raw)
	default:
		return nil, dns.ErrKeyAlg
	}
	h.Write(msg)
	return h.Sum(nil), nil
}

// refuseTSIG answers a request whose TSIG does not verify as RFC 8945 5.2 says (and nsd
// does): NOTAUTH, with a TSIG record carrying the error (BADKEY for an unknown key or
// algorithm, BADTIME outside the fudge, BADSIG otherwise) and no MAC - unsigned, since
// the request could not be trusted. Nothing of the request is served.
func (s *Server) refuseTSIG(w dns.ResponseWriter, req *dns.Msg, t *dns.TSIG, status error) {
	code := uint16(dns.RcodeBadSig)
	switch {
	case errors.Is(status, dns.ErrSecret), errors.Is(status, dns.ErrKeyAlg):
		code = dns.RcodeBadKey
	case errors.Is(status, dns.ErrTime):
		code = dns.RcodeBadTime
	}
	m := new(dns.Msg)
	m.SetRcode(req, dns.RcodeNotAuth)
	m.Extra = []dns.RR{&dns.TSIG{Hdr: dns.RR_Header{Name: t.Hdr.Name, Rrtype: dns.TypeTSIG, Class: dns.ClassANY},
		Algorithm: t.Algorithm, TimeSigned: t.TimeSigned, Fudge: t.Fudge, OrigId: req.Id, Error: code}}
	s.Queries[dns.RcodeNotAuth].Add(1)
	s.log.Info("authdns: TSIG refused", "key", t.Hdr.Name, "remote", w.RemoteAddr().String(), "error", dns.RcodeToString[int(code)])
	b, err := m.Pack()
	if err == nil {
		_, err = w.Write(b)
	}
	if err != nil {
		s.log.Debug("authdns: write", "remote", w.RemoteAddr().String(), "error", err)
	}
}
