package cplink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/kumadp/kuma-dp/mesh"
)

// ClientConfig configures the control-plane link.
type ClientConfig struct {
	// Address is the control plane's URL: grpcs://host:port or https://host:port (TLS, the
	// default when no scheme is given), grpc://host:port or http://host:port (plain text,
	// for a control plane on loopback only).
	Address string
	// CACertFile is the PEM CA that signed the control plane's certificate; empty uses the
	// system's roots.
	CACertFile string
	// TokenFile holds this dataplane's token, sent as "authorization: Bearer <token>"; it is
	// read again at every connection, so a rotated token is picked up. Empty sends none.
	TokenFile string
	// Name and Mesh identify the dataplane to the control plane. With a DataplaneFile they
	// default to its name and mesh (and must match it when given).
	Name, Mesh string
	// DataplaneFile, when set, is this dataplane's own resource (rendered with
	// DataplaneVars); without it the control plane's Dataplane named Name is used.
	DataplaneFile string
	DataplaneVars map[string]string
	// Backoff is the first wait after a failed connection (default 250 ms); it doubles at
	// every failure up to MaxBackoff (default 30 s), each wait drawn in [d/2, d] (jitter).
	Backoff, MaxBackoff time.Duration
	// KeepaliveInterval is how often the link checks that the control plane still answers
	// (default 10 s); KeepaliveTimeout is how long it waits for the answer (default the
	// interval, at most 5 s) before dropping the stream and reconnecting.
	KeepaliveInterval, KeepaliveTimeout time.Duration
	// ModelFile, when set, is where every accepted model is saved, and where Load finds the
	// last one when the control plane cannot be reached at start (served marked stale).
	ModelFile string
	// StaleAfter is how long Load waits for the control plane before serving the saved
	// model (default 1 s); 0 keeps the default, a negative value serves it at once.
	StaleAfter time.Duration
}

// The link's defaults, used where ClientConfig leaves a duration zero (and by kuma-dp's
// flags, so that the two never disagree).
const (
	DefaultBackoff           = 250 * time.Millisecond
	DefaultMaxBackoff        = 30 * time.Second
	DefaultKeepaliveInterval = 10 * time.Second
	// MaxResponseBytes is the largest response the link takes. A control plane answers a
	// new stream with one response per kind holding all of it: gRPC's default limit (4
	// MiB, some 13,000 Dataplanes) refused a large mesh's first sync at the transport,
	// and every reconnection was sent it again.
	MaxResponseBytes = 256 << 20
)

// Client is the control-plane link: a Source fed by incremental ADS (delta xDS) from a
// control plane. It ACKs responses whose resources decode and validate and whose model
// builds, NACKs the others with the error (naming resource and field) and keeps the last
// good model; it reconnects with exponential backoff and jitter, resuming with the versions
// it holds so nothing unchanged is sent again. Load returns only after the first complete
// sync (every kind received once).
type Client struct {
	cfg ClientConfig
	log *slog.Logger
	// targets are the control planes (replicas) to try, in order; cur is the one in use:
	// a failed session moves to the next, resuming with the versions held.
	targets []string
	cur     int
	creds   credentials.TransportCredentials
	// nameGiven, meshGiven: the identity was configured (--name, --mesh), not taken
	// from the dataplane file at start.
	nameGiven, meshGiven bool
	reload               chan struct{}

	startOnce sync.Once
	stopOnce  sync.Once
	cancel    context.CancelFunc
	done      chan struct{}
	updates   chan Update
	saveq     chan *mesh.Snapshot

	mu       sync.Mutex
	held     map[string]map[string]heldResource // kind -> name -> what the agent holds
	received map[string]bool                    // kinds answered at least once
	self     *mesh.Dataplane                    // from DataplaneFile, when given
	lastHash string
	// builder hashes again only what changed since the last model built; lastSnap is that
	// model and changed the held resources changed since (kind -> names).
	builder  mesh.SnapshotBuilder
	lastSnap *mesh.Snapshot
	changed  map[string]map[string]struct{}
	sent     bool // the first complete model went out
	noSelf   bool // logged: our Dataplane is not at the control plane
	// reachKey is the dataplane's reachable services (mesh.Reach.Key) the held dataplanes
	// were kept with: the others are held as their version only (res nil), so that a
	// resumed stream does not send them again. cancelSession ends the session running (with
	// errResync): a new list needs the dataplanes dropped for the old one, and a new
	// stream without their versions brings them.
	reachKey      string
	cancelSession context.CancelCauseFunc
	// refused are the kinds of which this stream NACKed a response: the control plane
	// counts its resources delivered, the good ones beside the bad one included, so the
	// next response of the kind accepted ends the session (errRefetch) and the next stream,
	// resuming with the versions held, brings them.
	refused map[string]bool

	stats        ClientStats
	saves        atomic.Int64  // model files written (tests)
	saveFailures atomic.Uint64 // writes of the model file that failed (ModelSaveFailures)
}

type heldResource struct {
	version string
	res     mesh.Resource // nil: a dataplane of a service this one does not reach
}

// errResync ends a session so that the next one fetches the dataplanes dropped for
// another list of reachable services.
var errResync = errors.New("reachable services changed: fetching the dataplanes they add")

// errRefetch ends a session so that the next one brings what a NACKed response carried.
var errRefetch = errors.New("a refused change was followed by an accepted one: fetching what the refused response carried")

// ClientStats counts what the link received, for benchmarks and metrics.
type ClientStats struct {
	Sessions      atomic.Int64 // connections that got at least one response
	Responses     atomic.Int64
	Resources     atomic.Int64 // resources received (updated or added)
	BytesReceived atomic.Int64 // protobuf size of the responses
	Nacks         atomic.Int64
}

// NewClient checks the configuration and returns the link; nothing connects until Load.
func NewClient(cfg ClientConfig, log *slog.Logger) (*Client, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	targets, useTLS, err := parseTargets(cfg.Address)
	if err != nil {
		return nil, fmt.Errorf("control plane address (--cp-address %q): %w", cfg.Address, err)
	}
	c := &Client{cfg: cfg, log: log, targets: targets, reload: make(chan struct{}, 1),
		updates: make(chan Update), done: make(chan struct{}), saveq: make(chan *mesh.Snapshot, 1),
		held: map[string]map[string]heldResource{}, received: map[string]bool{}, refused: map[string]bool{}}
	if useTLS {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.CACertFile != "" {
			pem, err := os.ReadFile(cfg.CACertFile)
			if err != nil {
				return nil, fmt.Errorf("control plane CA (--ca-cert-file %q): %w", cfg.CACertFile, err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("control plane CA (--ca-cert-file %q): no PEM certificate in it", cfg.CACertFile)
			}
			tc.RootCAs = pool
		}
		c.creds = credentials.NewTLS(tc)
	} else {
		if cfg.CACertFile != "" {
			return nil, fmt.Errorf("control plane address %q is plain text (grpc:// or http://): --ca-cert-file %q would not be used; use grpcs://", cfg.Address, cfg.CACertFile)
		}
		c.creds = insecure.NewCredentials()
	}
	if c.cfg.Backoff <= 0 {
		c.cfg.Backoff = DefaultBackoff
	}
	if c.cfg.MaxBackoff < c.cfg.Backoff {
		c.cfg.MaxBackoff = max(DefaultMaxBackoff, c.cfg.Backoff)
	}
	if c.cfg.StaleAfter == 0 {
		c.cfg.StaleAfter = time.Second
	}
	if c.cfg.KeepaliveInterval <= 0 {
		c.cfg.KeepaliveInterval = DefaultKeepaliveInterval
	}
	if c.cfg.KeepaliveTimeout <= 0 {
		c.cfg.KeepaliveTimeout = min(5*time.Second, c.cfg.KeepaliveInterval)
	}
	c.nameGiven, c.meshGiven = cfg.Name != "", cfg.Mesh != ""
	if cfg.DataplaneFile != "" {
		if err := c.loadSelf(); err != nil {
			return nil, err
		}
	}
	if c.cfg.Name == "" {
		return nil, errors.New("control plane link: the dataplane's name is needed (--name, or a --dataplane-file)")
	}
	if c.cfg.Mesh == "" {
		c.cfg.Mesh = "default"
	}
	return c, nil
}

// CheckAddress checks a control plane's URL (or several replicas' URLs, comma-separated)
// as NewClient reads it; the error says what is wrong, without the setting's name.
func CheckAddress(addr string) error {
	_, _, err := parseTargets(addr)
	return err
}

// parseTargets turns the control planes' URLs into gRPC targets and whether to use TLS.
func parseTargets(addr string) (targets []string, useTLS bool, err error) {
	parts := strings.Split(addr, ",")
	for i, a := range parts {
		a = strings.TrimSpace(a)
		target, tlsOn, err := parseAddress(a)
		if err != nil {
			if len(parts) > 1 {
				err = fmt.Errorf("replica %d of %d (%q): %w", i+1, len(parts), a, err)
			}
			return nil, false, err
		}
		if i > 0 && tlsOn != useTLS {
			return nil, false, errors.New("all TLS (grpcs://) or all plain text (grpc://), not a mix")
		}
		useTLS = tlsOn
		targets = append(targets, target)
	}
	return targets, useTLS, nil
}

// parseAddress turns one control plane's URL into a gRPC target and whether to use TLS.
func parseAddress(addr string) (target string, useTLS bool, err error) {
	if addr == "" {
		return "", false, errors.New("empty")
	}
	if !strings.Contains(addr, "://") {
		addr = "grpcs://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return "", false, err
	}
	switch u.Scheme {
	case "grpcs", "https":
		useTLS = true
	case "grpc", "http":
	default:
		return "", false, errors.New("scheme must be grpcs, https, grpc or http")
	}
	if u.Port() == "" || u.Hostname() == "" {
		return "", false, errors.New("want host:port")
	}
	if u.Path != "" && u.Path != "/" {
		return "", false, errors.New("no path expected")
	}
	return u.Host, useTLS, nil
}

// loadSelf reads this dataplane's own file, and takes name and mesh from it.
func (c *Client) loadSelf() error {
	data, err := os.ReadFile(c.cfg.DataplaneFile)
	if err == nil {
		data, err = RenderVars(data, c.cfg.DataplaneVars)
	}
	if err != nil {
		return mesh.Errors{{Source: c.cfg.DataplaneFile, Msg: err.Error()}}
	}
	rs, err := mesh.Decode(c.cfg.DataplaneFile, data)
	if err != nil {
		return err
	}
	self, errs := mesh.SelfDataplane(c.cfg.DataplaneFile, rs, nil)
	if len(errs) > 0 {
		return errs
	}
	dpMesh := self.Mesh
	if dpMesh == "" {
		dpMesh = "default"
	}
	if c.cfg.Name != "" && c.cfg.Name != self.Name {
		if !c.nameGiven {
			return fmt.Errorf("the dataplane file %s names %q now; this agent runs as %q: restart kuma-dp to run another dataplane", c.cfg.DataplaneFile, self.Name, c.cfg.Name)
		}
		return fmt.Errorf("--name %q does not match the dataplane file %s (name %q)", c.cfg.Name, c.cfg.DataplaneFile, self.Name)
	}
	if c.cfg.Mesh != "" && c.cfg.Mesh != dpMesh {
		if !c.meshGiven {
			return fmt.Errorf("the dataplane file %s is in mesh %q now; this agent runs in %q: restart kuma-dp to run another dataplane", c.cfg.DataplaneFile, dpMesh, c.cfg.Mesh)
		}
		return fmt.Errorf("--mesh %q does not match the dataplane file %s (mesh %q)", c.cfg.Mesh, c.cfg.DataplaneFile, dpMesh)
	}
	if c.cfg.Name == "" { // at NewClient only: on a reload both are set and were checked above
		c.cfg.Name = self.Name
	}
	if c.cfg.Mesh == "" {
		c.cfg.Mesh = dpMesh
	}
	c.mu.Lock()
	c.self = self
	c.mu.Unlock()
	return nil
}

// Stats is what the link received so far.
func (c *Client) Stats() *ClientStats { return &c.stats }

// Load connects and waits for the first complete, valid model (readiness is held until
// then); it returns early only when ctx is cancelled.
//
// With a ModelFile holding a model saved by an earlier run, Load waits at most StaleAfter
// for the control plane, then returns the saved model marked Stale: the agent serves it at
// once, and the first complete sync (delivered by Run, even when nothing changed) replaces it.
func (c *Client) Load(ctx context.Context) Update {
	c.start()
	var staleC <-chan time.Time
	if c.cfg.ModelFile != "" {
		if _, err := os.Stat(c.cfg.ModelFile); err == nil {
			t := time.NewTimer(max(c.cfg.StaleAfter, 0))
			defer t.Stop()
			staleC = t.C
		}
	}
	for {
		select {
		case u := <-c.updates:
			return u
		case <-staleC:
			staleC = nil
			snap, saved, err := c.loadSaved()
			if err != nil {
				c.log.Warn("the saved model is not usable; waiting for the control plane", "error", err)
				continue
			}
			c.log.Warn("control plane not reached yet: serving the model saved at the last sync (stale) until it is",
				"saved", saved.UTC().Format(time.RFC3339), "dataplanes", len(snap.Dataplanes))
			return Update{Snapshot: snap, Trigger: "saved", Stale: true}
		case <-ctx.Done():
			c.stop()
			return Update{Err: ctx.Err(), Trigger: "start"}
		}
	}
}

// Run delivers every later model (and every refusal) on out until ctx is cancelled, then
// closes the link.
func (c *Client) Run(ctx context.Context, out chan<- Update) error {
	c.start()
	defer c.stop()
	for {
		select {
		case u := <-c.updates:
			select {
			case out <- u:
			case <-ctx.Done():
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// Reload reads the dataplane file again and rebuilds the model from what the link holds
// (SIGHUP). Never blocks.
func (c *Client) Reload() {
	select {
	case c.reload <- struct{}{}:
	default:
	}
}

func (c *Client) start() {
	c.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel = cancel
		saved := make(chan struct{})
		go func() {
			defer close(saved)
			c.saveLoop(ctx)
		}()
		go func() {
			defer close(c.done)
			defer func() { <-saved }()
			c.loop(ctx)
		}()
	})
}

func (c *Client) stop() {
	c.stopOnce.Do(func() {
		if c.cancel != nil {
			c.cancel()
			<-c.done
		}
	})
}

// loop keeps a session up: reconnecting with backoff after every failure.
func (c *Client) loop(ctx context.Context) {
	reloadDone := make(chan struct{})
	go func() {
		defer close(reloadDone)
		for {
			select {
			case <-ctx.Done():
				return
			case <-c.reload:
				c.rebuild(ctx)
			}
		}
	}()
	defer func() { <-reloadDone }()
	failures := 0
	for {
		got, err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errResync) {
			c.log.Info("reachable services changed: reconnecting for the dataplanes they add")
			continue // at once, to the same control plane
		}
		if errors.Is(err, errRefetch) {
			c.log.Info("a change accepted after a refused one: reconnecting for what the refused response also carried")
			continue // at once, to the same control plane
		}
		if got {
			failures = 0
		}
		if len(c.targets) > 1 {
			// Another replica next, at once when this one served us (it was lost), after the
			// backoff otherwise.
			c.cur = (c.cur + 1) % len(c.targets)
			if got {
				c.log.Warn("control plane link down; trying the next replica", "error", err, "next", c.targets[c.cur])
				continue
			}
		}
		wait := c.backoff(failures)
		failures++
		c.logFailure(err, failures, wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// backoff is the wait after n consecutive failures: Backoff * 2^n capped at MaxBackoff,
// drawn uniformly in [d/2, d] so that agents cut off together do not return together.
func (c *Client) backoff(n int) time.Duration {
	d := c.cfg.Backoff
	for i := 0; i < n && d < c.cfg.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, c.cfg.MaxBackoff)
	return d/2 + rand.N(d/2+1)
}

// plainText reports whether the link was asked to run without TLS (grpc://, http://).
func (c *Client) plainText() bool {
	return strings.HasPrefix(c.cfg.Address, "grpc://") || strings.HasPrefix(c.cfg.Address, "http://")
}

// hostPort is addr without its scheme.
func hostPort(addr string) string {
	if _, rest, ok := strings.Cut(addr, "://"); ok {
		return rest
	}
	return addr
}

func (c *Client) logFailure(err error, attempt int, wait time.Duration) {
	attrs := []any{"cp_address", c.cfg.Address, "attempt", attempt, "retry_in", wait.Round(time.Millisecond)}
	switch status.Code(err) {
	case codes.Unauthenticated, codes.PermissionDenied:
		c.log.Error("the control plane refused this dataplane; check --dataplane-token-file, --name and --mesh",
			append(attrs, "error", status.Convert(err).Message())...)
		return
	case codes.ResourceExhausted:
		c.log.Error(fmt.Sprintf("refused a response from the control plane larger than the link takes (%d MiB); keeping the last good model", MaxResponseBytes>>20),
			append(attrs, "error", status.Convert(err).Message())...)
		return
	}
	if te := (*tokenError)(nil); errors.As(err, &te) {
		c.log.Error("cannot read this dataplane's token; trying again (a rotation writes it again)",
			append(attrs, "error", err)...)
		return
	}
	msg := "control plane link down; reconnecting"
	if err != nil && c.plainText() && strings.Contains(err.Error(), "server preface") {
		// A plain-text client reads a TLS server's handshake bytes (or its close) where the
		// HTTP/2 preface should be: gRPC says only "server preface: EOF".
		c.log.Error("the control plane speaks TLS but --cp-address is plain text: use grpcs://"+hostPort(c.cfg.Address),
			append(attrs, "error", err)...)
		return
	}
	if err != nil && strings.Contains(err.Error(), "x509") {
		// gRPC hands the handshake's error over as text only (no x509 error to unwrap).
		switch e := err.Error(); {
		case strings.Contains(e, "has expired or is not yet valid"):
			msg = "the control plane's certificate has expired or is not yet valid: renew it at the control plane (or check this host's clock)"
		case strings.Contains(e, "certificate is valid for"), strings.Contains(e, "doesn't contain any IP SANs"):
			msg = "the control plane's certificate does not name the host of --cp-address: use a name or IP its certificate lists"
		default:
			msg = "the control plane's certificate is not trusted; check --ca-cert-file"
		}
		c.log.Error(msg, append(attrs, "error", err)...)
		return
	}
	c.log.Warn(msg, append(attrs, "error", err)...)
}

// errKeepalive is the cause given to a session whose control plane stopped answering.
var errKeepalive = errors.New("keepalive: the control plane stopped answering")

// session runs one connection and stream until it fails; got is whether any response came.
func (c *Client) session(ctx context.Context) (got bool, err error) {
	token, err := c.token()
	if err != nil {
		return false, err
	}
	conn, err := grpc.NewClient(c.targets[c.cur%len(c.targets)], grpc.WithTransportCredentials(c.creds),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{
			Time: max(c.cfg.KeepaliveInterval, 10*time.Second), Timeout: c.cfg.KeepaliveTimeout, PermitWithoutStream: true}),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxResponseBytes)),
		// A replica that accepts connections and never answers (a stopped process, a
		// full accept queue) fails the attempt after the keepalive timeout (at least 1 s), as a silent
		// stream does: the next replica is tried then, not after gRPC's 20 s.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: max(c.cfg.KeepaliveTimeout, time.Second)}))
	if err != nil {
		return false, err
	}
	defer conn.Close()
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	c.mu.Lock()
	c.cancelSession = cancel
	c.mu.Unlock()
	if token != "" {
		sctx = metadata.AppendToOutgoingContext(sctx, "authorization", "Bearer "+token)
	}
	go c.keepalive(sctx, cancel, conn)

	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).DeltaAggregatedResources(sctx)
	if err != nil {
		return false, causeOf(sctx, err)
	}
	c.mu.Lock()
	clear(c.received) // a new stream: every kind is answered again before the model counts as synced
	clear(c.refused)  // and what it sends starts from the versions held
	for i, kind := range Kinds {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: TypeURL(kind), InitialResourceVersions: c.versionsLocked(kind)}
		if i == 0 {
			req.Node = &core.Node{Id: c.cfg.Name, Cluster: c.cfg.Mesh, UserAgentName: "kuma-dp"}
		}
		if err := stream.Send(req); err != nil {
			c.mu.Unlock()
			return false, causeOf(sctx, err)
		}
	}
	c.mu.Unlock()
	for {
		resp, err := stream.Recv()
		if err != nil {
			return got, causeOf(sctx, err)
		}
		if !got {
			got = true
			c.stats.Sessions.Add(1)
			c.log.Info("connected to the control plane", "cp_address", c.cfg.Address, "name", c.cfg.Name, "mesh", c.cfg.Mesh)
		}
		ack := c.handle(sctx, resp)
		if err := stream.Send(ack); err != nil {
			return got, causeOf(sctx, err)
		}
	}
}

func causeOf(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// keepalive asks the control plane's health service every interval; no answer within the
// timeout ends the session (a stalled stream, a frozen process, a dropped path), so the
// link reconnects instead of waiting on a stream that will never speak again. gRPC's own
// transport keepalive (at least 10 s) runs beneath it.
func (c *Client) keepalive(ctx context.Context, cancel context.CancelCauseFunc, conn *grpc.ClientConn) {
	health := healthpb.NewHealthClient(conn)
	t := time.NewTicker(c.cfg.KeepaliveInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, c.cfg.KeepaliveTimeout)
		_, err := health.Check(pctx, &healthpb.HealthCheckRequest{})
		pcancel()
		if ctx.Err() != nil {
			return
		}
		if err != nil && status.Code(err) != codes.Unimplemented {
			c.log.Warn("the control plane did not answer the keepalive; dropping the stream", "timeout", c.cfg.KeepaliveTimeout, "error", err)
			cancel(fmt.Errorf("%w within %s: %v", errKeepalive, c.cfg.KeepaliveTimeout, err))
			return
		}
	}
}

// tokenError is a token file that cannot be read: this side's problem, not the link's.
type tokenError struct{ error }

func (e *tokenError) Unwrap() error { return e.error }

func (c *Client) token() (string, error) {
	if c.cfg.TokenFile == "" {
		return "", nil
	}
	b, err := os.ReadFile(c.cfg.TokenFile)
	if err != nil {
		return "", &tokenError{fmt.Errorf("dataplane token (--dataplane-token-file %q): %w", c.cfg.TokenFile, err)}
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", &tokenError{fmt.Errorf("dataplane token (--dataplane-token-file %q): empty", c.cfg.TokenFile)}
	}
	return t, nil
}

func (c *Client) versionsLocked(kind string) map[string]string {
	held := c.held[kind]
	if len(held) == 0 {
		return nil
	}
	out := make(map[string]string, len(held))
	for name, h := range held {
		out[name] = h.version
	}
	return out
}

// handle applies one response and returns its ACK, or its NACK when a resource does not
// decode and validate or the model does not build; the last good model stays either way.
func (c *Client) handle(ctx context.Context, resp *discovery.DeltaDiscoveryResponse) *discovery.DeltaDiscoveryRequest {
	start := time.Now()
	c.stats.Responses.Add(1)
	c.stats.BytesReceived.Add(int64(proto.Size(resp)))
	c.stats.Resources.Add(int64(len(resp.GetResources())))
	ack := &discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}
	kind := KindOf(resp.GetTypeUrl())
	if kind == "" {
		return c.nack(ack, fmt.Errorf("type URL %q is not one of the link's", resp.GetTypeUrl()))
	}
	type change struct {
		name string
		h    heldResource
		gone bool
	}
	changes := make([]change, 0, len(resp.GetRemovedResources())+len(resp.GetResources()))
	for _, name := range resp.GetRemovedResources() {
		changes = append(changes, change{name: name, gone: true})
	}
	var errs mesh.Errors
	for _, r := range resp.GetResources() {
		var env wrapperspb.BytesValue
		if r.GetResource() == nil || proto.Unmarshal(r.GetResource().GetValue(), &env) != nil {
			errs = append(errs, &mesh.FieldError{Source: "control plane " + kind + "/" + r.GetName(), Kind: kind, Name: r.GetName(),
				Msg: "the envelope is not a google.protobuf.BytesValue"})
			continue
		}
		res, err := DecodeResource(kind, r.GetName(), env.GetValue())
		if err != nil {
			errs = mesh.AppendErrors(errs, err)
			continue
		}
		changes = append(changes, change{name: r.GetName(), h: heldResource{version: r.GetVersion(), res: res}})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(errs) > 0 {
		c.refused[kind] = true
		return c.nack(ack, errs)
	}
	// The response is applied to what the link holds in place (a mesh's worth of
	// dataplanes is not copied for each change), noting what it replaced, so that a model
	// that does not build is undone.
	held := c.held[kind]
	if held == nil {
		held = map[string]heldResource{}
		c.held[kind] = held
	}
	var undo []heldChange
	set := func(name string, h heldResource, gone bool) {
		old, had := held[name]
		undo = append(undo, heldChange{name: name, h: old, had: had})
		if gone {
			delete(held, name)
		} else {
			held[name] = h
		}
		c.changedLocked(kind, name)
	}
	names := make([]string, 0, len(changes))
	for _, ch := range changes {
		set(ch.name, ch.h, ch.gone)
		names = append(names, ch.name)
	}
	prevKey := c.reachKey
	if kind == mesh.KindDataplane {
		c.keepReachableLocked(held, names, set)
	}
	c.received[kind] = true
	if len(c.received) < len(Kinds) {
		return ack // not yet a complete model
	}
	snap, err := c.buildLocked()
	if errors.Is(err, errNoSelf) {
		c.refetchLocked(kind)
		return ack // the model is fine; this dataplane is not in it yet
	}
	if err != nil {
		for i := len(undo) - 1; i >= 0; i-- {
			if u := undo[i]; u.had {
				held[u.name] = u.h
			} else {
				delete(held, u.name)
			}
		}
		c.reachKey = prevKey
		c.refused[kind] = true
		return c.nack(ack, err)
	}
	c.emitLocked(ctx, snap, "cp", start)
	c.refetchLocked(kind)
	return ack
}

// refetchLocked ends the session when kind had a response refused on this stream (see
// Client.refused), now that one is accepted.
func (c *Client) refetchLocked(kind string) {
	if c.refused[kind] && c.cancelSession != nil {
		delete(c.refused, kind)
		c.cancelSession(errRefetch)
	}
}

func (c *Client) nack(ack *discovery.DeltaDiscoveryRequest, err error) *discovery.DeltaDiscoveryRequest {
	c.stats.Nacks.Add(1)
	c.log.Warn("refused a change from the control plane (NACK); keeping the last good model",
		"type_url", ack.GetTypeUrl(), "error", err.Error())
	ack.ErrorDetail = &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}
	return ack
}

var errNoSelf = errors.New("this dataplane is not at the control plane")

// keepReachableLocked drops from dps (the held dataplanes) those of services this
// dataplane does not reach (Kuma's transparentProxying.reachableServices), keeping their
// versions: among names, those just changed, or among all when the list changed (names
// nil: all). Each change goes through set (which notes it), deletions included. When the
// list changed since the held dataplanes were kept, those dropped for the old list are
// forgotten and the session ends: the next stream, without their versions, brings the ones
// the new list reaches.
func (c *Client) keepReachableLocked(dps map[string]heldResource, names []string, set func(name string, h heldResource, gone bool)) {
	self := c.self
	if self == nil {
		h, ok := dps[c.cfg.Name]
		if !ok || h.res == nil {
			return // the list is not known yet: everything is kept
		}
		self = h.res.(*mesh.Dataplane)
	}
	reach := mesh.ReachOf(self)
	if key := reach.Key(); key != c.reachKey {
		dropped := false
		for name, h := range dps {
			if h.res == nil {
				set(name, h, true)
				dropped = true
			}
		}
		if dropped && c.cancelSession != nil {
			c.cancelSession(errResync)
		}
		c.reachKey = key
		names = nil
	}
	if reach == nil {
		return
	}
	keep := func(name string, h heldResource) {
		if h.res != nil && !reach.Keeps(h.res.(*mesh.Dataplane)) {
			set(name, heldResource{version: h.version}, false)
		}
	}
	if names == nil {
		for name, h := range dps {
			keep(name, h)
		}
		return
	}
	for _, name := range names {
		if h, ok := dps[name]; ok {
			keep(name, h)
		}
	}
}

// heldChange is what a held resource was before a response changed it (had: there was one).
type heldChange struct {
	name string
	h    heldResource
	had  bool
}

// changedLocked notes that kind/name changed since the last model built.
func (c *Client) changedLocked(kind, name string) {
	if c.changed == nil {
		c.changed = map[string]map[string]struct{}{}
	}
	m := c.changed[kind]
	if m == nil {
		m = map[string]struct{}{}
		c.changed[kind] = m
	}
	m[name] = struct{}{}
}

// buildLocked builds the model from what the link holds, with mesh.NewSnapshot's rules.
// The resources go to the builder in the last model's order, the changed ones after them,
// so its sort has next to nothing to do (a map's order cost a full sort of every name).
func (c *Client) buildLocked() (*mesh.Snapshot, error) {
	self := c.self
	if self == nil {
		h, ok := c.held[mesh.KindDataplane][c.cfg.Name]
		if !ok {
			if !c.noSelf {
				c.noSelf = true
				c.log.Warn("waiting for this dataplane's own Dataplane at the control plane (or give --dataplane-file)",
					"name", c.cfg.Name, "mesh", c.cfg.Mesh)
			}
			return nil, errNoSelf
		}
		self = h.res.(*mesh.Dataplane)
	}
	c.noSelf = false
	n := 0
	for _, kind := range Kinds {
		n += len(c.held[kind])
	}
	rs := make([]mesh.Resource, 0, n)
	if last := c.lastSnap; last != nil && last.Self == self {
		// Unchanged resources are the last model's (held as they were: every change to
		// what the link holds is noted in c.changed), merged in name order with the
		// changed ones; the last model left out what its self's mesh and reachable
		// services leave out, and self is the same.
		for _, kind := range Kinds {
			changed := make([]string, 0, len(c.changed[kind]))
			for name := range c.changed[kind] {
				changed = append(changed, name)
			}
			slices.Sort(changed)
			var news []mesh.Resource // the changed ones still held, in name order
			for _, name := range changed {
				if h, ok := c.held[kind][name]; ok && h.res != nil {
					news = append(news, h.res)
				}
			}
			for r := range last.Resources(kind) {
				name := r.GetMeta().Name
				for len(news) > 0 && news[0].GetMeta().Name < name {
					rs, news = append(rs, news[0]), news[1:]
				}
				for len(changed) > 0 && changed[0] < name {
					changed = changed[1:]
				}
				if len(changed) > 0 && changed[0] == name {
					continue // held anew (in news) or gone
				}
				rs = append(rs, r)
			}
			rs = append(rs, news...)
		}
	} else {
		for _, kind := range Kinds {
			for _, h := range c.held[kind] {
				if h.res != nil {
					rs = append(rs, h.res)
				}
			}
		}
	}
	snap, err := c.builder.Build(self, rs)
	if err == nil {
		c.lastSnap, c.changed = snap, nil
	}
	return snap, err
}

// emitLocked hands a model to Load or Run, unless it is the one already delivered (a
// resumed stream with nothing changed).
func (c *Client) emitLocked(ctx context.Context, snap *mesh.Snapshot, trigger string, start time.Time) {
	if c.sent && snap.Hash == c.lastHash {
		c.log.Debug("in sync with the control plane; nothing changed")
		return
	}
	if !c.sent {
		trigger = "start"
	}
	select {
	case c.updates <- Update{Snapshot: snap, Trigger: trigger, Took: time.Since(start)}:
		c.sent = true
		c.lastHash = snap.Hash
		c.queueSave(snap)
		if trigger == "start" {
			c.log.Info("first complete sync with the control plane", "dataplanes", len(snap.Dataplanes),
				"virtual_outbounds", len(snap.VirtualOutbounds), "traffic_routes", len(snap.TrafficRoutes))
		}
	case <-ctx.Done():
	}
}

// rebuild re-reads the dataplane file and rebuilds the model (SIGHUP).
func (c *Client) rebuild(ctx context.Context) {
	c.mu.Lock()
	sent := c.sent
	c.mu.Unlock()
	if !sent {
		return // nothing complete to rebuild yet; Load is still waiting for the first sync
	}
	if c.cfg.DataplaneFile != "" {
		if err := c.loadSelf(); err != nil {
			c.send(ctx, Update{Err: err, Trigger: "reload"})
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if dps := c.held[mesh.KindDataplane]; dps != nil {
		// the dataplane file may list other reachable services now
		c.keepReachableLocked(dps, nil, func(name string, h heldResource, gone bool) {
			if gone {
				delete(dps, name)
			} else {
				dps[name] = h
			}
			c.changedLocked(mesh.KindDataplane, name)
		})
	}
	snap, err := c.buildLocked()
	if errors.Is(err, errNoSelf) {
		return
	}
	if err != nil {
		c.send(ctx, Update{Err: err, Trigger: "reload"})
		return
	}
	c.lastHash = "" // a reload always delivers
	c.emitLocked(ctx, snap, "reload", time.Now())
}

func (c *Client) send(ctx context.Context, u Update) {
	select {
	case c.updates <- u:
	case <-ctx.Done():
	}
}
