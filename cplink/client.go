package cplink

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

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

	// maxGunzip is the most a compressed response may hold once decompressed
	// (MaxResponseBytes: what the link takes uncompressed).
	maxGunzip int64

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
		held: map[string]map[string]heldResource{}, received: map[string]bool{}, refused: map[string]bool{},
		maxGunzip: MaxResponseBytes}
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
