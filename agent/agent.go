package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kumadp/kuma-dp/cplink"
)

// Agent runs the composed parts. Create it with New, run it with Run (or RunWithSignals).
type Agent struct {
	cfg   Config
	log   *slog.Logger
	parts Parts
	start time.Time

	model   modelState
	metrics *metrics
	memory  releaser // returns a load's garbage to the OS (memory.go)

	dnsReady atomic.Bool
	draining atomic.Bool
	// stale: the model served is the one saved at the last sync with the control plane,
	// not yet confirmed by it (see cplink.ClientConfig.ModelFile).
	stale atomic.Bool
	// refusedFiles is how many files the model served was built without their newest
	// content (cplink.Update.Refused); refusedSeen what was last logged of each, by path.
	refusedFiles atomic.Int64
	refusedSeen  map[string]string
	// envoyPublished: Envoy's resources were published at least once.
	envoyPublished atomic.Bool
	ready          atomic.Bool // every condition of /ready held at least once

	adminAddr atomic.Pointer[net.TCPAddr]
	readyAddr atomic.Pointer[net.TCPAddr]
	abortOnce sync.Once
	abort     chan struct{}
}

// InvalidModelError is returned by Run when the first model does not load or validate: the
// agent never started serving.
type InvalidModelError struct{ Err error }

func (e *InvalidModelError) Error() string { return "the model does not validate: " + e.Err.Error() }
func (e *InvalidModelError) Unwrap() error { return e.Err }

// New composes the parts. start is when the process started (for the startup time reported
// when ready); zero means now.
func New(cfg Config, parts Parts, log *slog.Logger, start time.Time) (*Agent, error) {
	if parts.Source == nil || parts.Allocator == nil || parts.DNS == nil {
		return nil, errors.New("agent: source, allocator and DNS are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if start.IsZero() {
		start = time.Now()
	}
	a := &Agent{cfg: cfg, log: log, parts: parts, start: start, abort: make(chan struct{})}
	a.metrics = newMetrics(a)
	return a, nil
}

// Reload asks the source for a load now, changed or not (SIGHUP).
func (a *Agent) Reload() { a.parts.Source.Reload() }

// Abort cuts a graceful shutdown short: the remaining drain is skipped and the parts stop
// at once (a second SIGTERM).
func (a *Agent) Abort() { a.abortOnce.Do(func() { close(a.abort) }) }

// AdminAddr is the bound admin address, once Run has bound it.
func (a *Agent) AdminAddr() net.Addr {
	if p := a.adminAddr.Load(); p != nil {
		return p
	}
	return nil
}

// part is one running part: how to stop it and where its result arrives.
type part struct {
	name   string
	cancel context.CancelFunc
	done   chan error
	// reported: its error is what Run returns (and the caller logs): stopPart does not log
	// it a second time.
	reported bool
}

// fail takes p's error as Run's result: it stays readable in done, and is not logged again.
func (p *part) fail(err error) error {
	p.reported = true
	p.done <- err
	return orStopped(err)
}

func (a *Agent) startPart(name string, run func(context.Context) error) *part {
	ctx, cancel := context.WithCancel(context.Background())
	p := &part{name: name, cancel: cancel, done: make(chan error, 1)}
	go func() { p.done <- run(ctx) }()
	return p
}

// stop cancels a part and waits for it, at most grace (a part that does not return is
// reported, not waited for forever).
func (a *Agent) stopPart(p *part, grace time.Duration) {
	if p == nil {
		return
	}
	p.cancel()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case err := <-p.done:
		if err != nil && !p.reported {
			a.log.Warn("part stopped with an error", "part", p.name, "error", err)
		} else {
			a.log.Debug("part stopped", "part", p.name)
		}
		p.done <- err // keep it readable for anyone else waiting
	case <-t.C:
		a.log.Error("part did not stop in time", "part", p.name, "grace", grace)
	}
}

// Run loads the first model, starts every part, serves until ctx is cancelled, then shuts
// down gracefully: readiness 503, Envoy drained for the drain time (DNS keeps answering),
// then the parts stop in reverse order of their start. A first model that does not
// validate returns an *InvalidModelError before anything serves.
func (a *Agent) Run(ctx context.Context) error {
	defer tuneGC()()
	defer a.parts.Allocator.Flush() // the VIPs of the last changes, written at once (vipalloc's state file)
	a.removeStaleReadyFile()
	stopAdmin, err := a.serveAdmin()
	if err != nil {
		return err
	}
	defer stopAdmin()

	// What initialising the linked packages touched of the binary goes back before the
	// first load, and what decoding touched before the allocation, and what allocating
	// touched before the resolver starts, so that none adds to the peak of the next step
	// (memory.go; each step's own code and the GC's reads come back as they are used).
	unmapBinaryPages() //nolint:errcheck // advice: nothing to do when refused
	first := a.parts.Source.Load(ctx)
	if ctx.Err() != nil {
		return nil // stopped while waiting for the first model
	}
	if first.Err != nil {
		a.logRefusal(first)
		a.metrics.reloads.WithLabelValues("refused").Inc()
		return &InvalidModelError{Err: first.Err}
	}
	unmapBinaryPages() //nolint:errcheck
	table, err := a.applyTable(first)
	if err != nil {
		return &InvalidModelError{Err: err}
	}
	// The first load's garbage (a large model's: applyTable released it) is back with the
	// OS before the resolver starts, so that what starting it maps does not add to it.
	a.memory.wait()
	unmapBinaryPages() //nolint:errcheck

	uninstall, err := a.installTransparentProxy(ctx)
	if err != nil {
		return err
	}
	defer uninstall() // deferred first among the parts, so it runs after they all stopped

	dnsPart := a.startPart("dns", a.parts.DNS.Run)
	defer a.stopPart(dnsPart, 3*time.Second)
	select {
	case <-a.parts.DNS.Ready():
		a.dnsReady.Store(true)
	case err := <-dnsPart.done:
		return fmt.Errorf("dns: %w", a.explainDNS(dnsPart.fail(err)))
	case <-ctx.Done():
		return nil
	}

	// Envoy's first resources are generated while Envoy itself starts (it waits for them
	// over ADS), so the two costs overlap; changes wait until they are published.
	var envoyPart *part
	var firstEnvoy chan struct{}
	if a.parts.Envoy != nil {
		firstEnvoy = make(chan struct{})
		snap, table := first.Snapshot, table // the goroutine's own: Run's are cleared below
		go func() {
			defer close(firstEnvoy)
			a.applyEnvoy(snap, table)
		}()
		defer func() { <-firstEnvoy }()
		envoyPart = a.startPart("envoy", a.parts.Envoy.Run)
		defer a.stopPart(envoyPart, envoyStopGrace+time.Second)
	}

	// The first model and table are the agent's model now (a.model): this frame, which
	// lives as long as the agent, must not keep them once a newer model replaces them.
	first, table = cplink.Update{}, nil

	updates := make(chan cplink.Update)
	sourcePart := a.startPart("source", func(ctx context.Context) error { return a.parts.Source.Run(ctx, updates) })
	defer a.stopPart(sourcePart, 2*time.Second)

	defer a.removeReadyFile()
	return a.serve(ctx, updates, firstEnvoy, dnsPart, envoyPart, sourcePart)
}

// EverReady reports whether the agent was ready at least once: a failure before that is a
// failed start.
func (a *Agent) EverReady() bool { return a.ready.Load() }

// explainDNS adds to a resolver error what to change when its port is taken.
func (a *Agent) explainDNS(err error) error {
	if s := inUse(err, "--dns-proxy-port (KUMA_DNS_PROXY_PORT, dns.proxyPort in --config) or --dns-address (KUMA_DNS_ADDRESS, dns.addresses)"); s != "" {
		return fmt.Errorf("%w%s", err, s)
	}
	return err
}

// inUse is the hint for an address already in use: which setting picks another ("" for any
// other error).
func inUse(err error, setting string) string {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return ""
	}
	return "; the address is in use (another kuma-dp still running, or another server?): stop it, or choose another with " + setting
}

// serveAdmin binds the admin endpoint (and the readiness endpoint when configured) and
// serves them until the returned stop is called.
func (a *Agent) serveAdmin() (stop func(), err error) {
	ln, err := net.Listen("tcp", a.cfg.Admin.Address)
	if err != nil {
		return nil, fmt.Errorf("admin endpoint %q: %w%s", a.cfg.Admin.Address, err,
			inUse(err, "--admin-address (KUMA_ADMIN_ADDRESS, admin.address in --config)"))
	}
	a.adminAddr.Store(ln.Addr().(*net.TCPAddr))
	admin := &http.Server{Handler: a.adminMux(), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: slog.NewLogLogger(a.log.Handler(), slog.LevelDebug)}
	parts := []*part{a.startPart("admin", serveHTTP(admin, ln))}
	stop = func() {
		for i := len(parts) - 1; i >= 0; i-- {
			a.stopPart(parts[i], 2*time.Second)
		}
	}
	if addr := a.cfg.Admin.ReadinessAddress; addr != "" {
		rl, err := net.Listen("tcp", addr)
		if err != nil {
			stop()
			return nil, fmt.Errorf("readiness endpoint %q: %w%s", addr, err,
				inUse(err, "--readiness-address (KUMA_READINESS_ADDRESS, admin.readinessAddress in --config)"))
		}
		a.readyAddr.Store(rl.Addr().(*net.TCPAddr))
		mux := http.NewServeMux()
		mux.HandleFunc("GET /ready", a.serveReady)
		parts = append(parts, a.startPart("readiness", serveHTTP(&http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, rl)))
	}
	return stop, nil
}

// installTransparentProxy installs the rules when asked; the returned function removes them
// when asked to at exit (and does nothing otherwise).
func (a *Agent) installTransparentProxy(ctx context.Context) (uninstall func(), err error) {
	tp := a.parts.TransparentProxy
	if tp == nil {
		return func() {}, nil
	}
	if err := tp.Install(ctx); err != nil {
		return nil, fmt.Errorf("transparent proxy: %w", err)
	}
	a.log.Info("transparent proxy installed")
	if !a.cfg.TransparentProxy.UninstallOnExit {
		return func() {}, nil
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := tp.Uninstall(uctx); err != nil {
			a.log.Error("transparent proxy: uninstall", "error", err)
		} else {
			a.log.Info("transparent proxy uninstalled")
		}
	}, nil
}

// serve applies the source's updates until ctx ends (then drains) or a part fails.
// Readiness is announced once (log line and ready file), as soon as every condition holds:
// at once without Envoy, else when Envoy turns live (polled).
func (a *Agent) serve(ctx context.Context, updates <-chan cplink.Update, firstEnvoy <-chan struct{}, dnsPart, envoyPart, sourcePart *part) error {
	// Until the first Envoy resources are published, changes wait (in the source): a later
	// model must never be published before an earlier one.
	source := updates
	if firstEnvoy != nil {
		source = nil
	}
	readyTick := time.NewTicker(5 * time.Millisecond)
	defer readyTick.Stop()
	checkReady := func() {
		if ok, _ := a.readiness(); ok && !a.ready.Swap(true) {
			a.announceReady()
			readyTick.Stop()
		}
	}
	checkReady()
	for {
		select {
		case <-firstEnvoy:
			firstEnvoy, source = nil, updates
		case <-ctx.Done():
			if firstEnvoy != nil {
				<-firstEnvoy
			}
			return a.drain(updates, dnsPart, envoyPart)
		case u := <-source:
			a.take(u)
		case err := <-dnsPart.done:
			return fmt.Errorf("dns: %w", a.explainDNS(dnsPart.fail(err)))
		case err := <-envoyDone(envoyPart):
			return fmt.Errorf("envoy: %w", envoyPart.fail(err))
		case err := <-sourcePart.done:
			return fmt.Errorf("model source: %w", sourcePart.fail(err))
		case <-readyTick.C:
			checkReady()
		}
	}
}

// take applies an update from the source, or logs why it is refused. It is serve's loop
// body in a function of its own, so that the update is in no variable of serve's frame
// once applied: that frame lives as long as the agent, and an update held there would
// keep a whole superseded model in memory until the next one arrives.
func (a *Agent) take(u cplink.Update) {
	if u.Err != nil {
		a.logRefusal(u)
		a.metrics.reloads.WithLabelValues("refused").Inc()
		return
	}
	_ = a.apply(u)
}

// serveHTTP serves srv on ln until the context ends, then shuts it down.
func serveHTTP(srv *http.Server, ln net.Listener) func(context.Context) error {
	return func(ctx context.Context) error {
		errc := make(chan error, 1)
		go func() { errc <- srv.Serve(ln) }()
		select {
		case err := <-errc:
			return err
		case <-ctx.Done():
		}
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		err := srv.Shutdown(sctx)
		<-errc
		return err
	}
}

func envoyDone(p *part) <-chan error {
	if p == nil {
		return nil
	}
	return p.done
}

func orStopped(err error) error {
	if err == nil {
		return errors.New("stopped unexpectedly")
	}
	return err
}

// drain is the graceful part of shutdown: readiness goes 503 at once, Envoy drains for the
// drain time while DNS keeps answering (and changes keep applying), unless Abort. Without
// Envoy there is nothing to drain: it returns at once.
func (a *Agent) drain(updates <-chan cplink.Update, dnsPart, envoyPart *part) error {
	a.draining.Store(true)
	if a.parts.Envoy == nil || envoyPart == nil {
		a.log.Info("shutting down: no Envoy, so nothing to drain; stopping now")
		return nil
	}
	d := time.Duration(a.cfg.Dataplane.DrainTime)
	a.log.Info("shutting down: readiness is 503, draining (a second SIGTERM or Ctrl-C stops at once)", "drain_time", d)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	go func() {
		select {
		case <-a.abort:
			cancel()
		case <-ctx.Done():
		}
	}()
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		if err := a.parts.Envoy.Drain(ctx, d); err != nil {
			a.log.Warn("envoy drain", "error", err)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			<-drained
			a.log.Info("drained; stopping parts")
			return nil
		case u := <-updates:
			if u.Err == nil {
				_ = a.apply(u)
			}
		case err := <-dnsPart.done:
			dnsPart.done <- err
			cancel()
		}
	}
}
