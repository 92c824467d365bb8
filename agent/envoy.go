package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/kumadp/kuma-dp/bootstrap"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
	"github.com/kumadp/kuma-dp/xds"
)

// envoyPart is the Envoy part: the local xDS server on a unix socket in the work dir, the
// bootstrap pointing Envoy at it, and the supervisor running Envoy.
type envoyPart struct {
	log       *slog.Logger
	gen       *xds.Generator // remembers the previous model: a change costs what it changes
	server    *xds.Server
	sup       *bootstrap.Supervisor
	bootPath  string
	xdsSocket string
	adminSock string
	tproxy    bool
	// ipv6: the host has IPv6, so the capture listeners listen on [::] (IPv4 too): the
	// transparent proxy redirects IPv6 by default and DNS answers each VIP's IPv6 twin, whose
	// connections an IPv4-only listener would refuse.
	ipv6      bool
	caBundle  string
	drainTime time.Duration
	mu        sync.Mutex
	self      *mesh.Dataplane // identity for the bootstrap, from the first model
	// identified is closed when the first Update has named the dataplane.
	identified chan struct{}
	selfMesh   string
	// adminLive is Envoy's own answer: GET /ready on its admin socket said LIVE (Envoy
	// answers 503 until its initial configuration is in place).
	adminLive atomic.Bool
	client    *http.Client
}

func newEnvoyPart(cfg Config, workDir, binary string, log *slog.Logger) (*envoyPart, error) {
	e := &envoyPart{
		log:       log,
		bootPath:  filepath.Join(workDir, "envoy-bootstrap.json"),
		xdsSocket: filepath.Join(workDir, "xds.sock"),
		adminSock: filepath.Join(workDir, "envoy-admin.sock"),
		tproxy:    cfg.TransparentProxy.Enabled,
		ipv6:      hostHasIPv6(),
		caBundle:  xds.FindSystemCA(),
		drainTime: time.Duration(cfg.Dataplane.DrainTime),
	}
	for _, p := range []string{e.xdsSocket, e.adminSock} {
		if len(p) > 107 {
			return nil, fmt.Errorf("work dir (dataplaneRuntime.workDir %q) is too long: the socket %s would be %d bytes, unix sockets allow 107", workDir, p, len(p))
		}
	}
	e.server = xds.NewServer(e.xdsSocket, log.With("part", "xds"))
	e.gen = xds.NewGenerator()
	e.identified = make(chan struct{})
	sock := e.adminSock
	e.client = &http.Client{Timeout: time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		DisableKeepAlives: true,
	}}
	level := "info"
	if cfg.Log.Level == "debug" {
		level = "debug"
	}
	e.sup = &bootstrap.Supervisor{Binary: binary, ConfigPath: e.bootPath, DrainTime: e.drainTime,
		LogLevel: level, AdminSocket: e.adminSock, StopGrace: envoyStopGrace, Log: log}
	return e, nil
}

// envoyStopGrace is how long Envoy gets after SIGTERM (its drain is over by then) before
// SIGKILL. The agent waits a second more for the Envoy part to stop: with the supervisor's
// default (10 s) an Envoy ignoring SIGTERM outlived the agent's wait and was killed only
// when kuma-dp itself exited.
const envoyStopGrace = 4 * time.Second

// Update generates the resources of a model and publishes them; policies that cannot be
// expressed are left out and logged, invalid resources are refused (Envoy keeps the last
// good ones).
func (e *envoyPart) Update(snap *mesh.Snapshot, table *vipalloc.Table) (any, error) {
	e.mu.Lock()
	if e.self == nil {
		e.self, e.selfMesh = snap.Self, snap.Mesh
		close(e.identified) // Run may write the bootstrap and start Envoy now
	}
	e.mu.Unlock()
	opts := xds.Options{TransparentProxy: e.tproxy, IPv6: e.ipv6, CABundle: e.caBundle}
	if tp := snap.Self.Networking.TransparentProxying(); tp != nil {
		opts.TransparentProxy = true
		opts.OutboundPort, opts.InboundPort = tp.RedirectPortOutbound, tp.RedirectPortInbound
	}
	res, err := e.gen.Generate(snap, table, opts)
	if err != nil {
		return nil, err
	}
	for _, p := range res.Problems {
		e.log.Warn("policy left out of Envoy's configuration", "problem", p.String())
	}
	for _, c := range res.Conflicts {
		e.log.Info("TrafficRoute chosen by creation time or name only", "conflict", c)
	}
	if err := e.server.Update(res); err != nil {
		return nil, err
	}
	return envoyDump{res}, nil
}

// Run writes the bootstrap, serves xDS and runs Envoy; on cancel Envoy stops first, then
// the xDS server.
func (e *envoyPart) Run(ctx context.Context) error {
	select {
	case <-e.identified: // the first Update names the dataplane (node id, service)
	case <-ctx.Done():
		return nil
	}
	e.mu.Lock()
	self, meshName := e.self, e.selfMesh
	e.mu.Unlock()
	if self == nil {
		return fmt.Errorf("envoy: no model yet")
	}
	service := ""
	if in := self.Networking.Inbound; len(in) > 0 {
		service = in[0].Tags.Value(mesh.ServiceTag)
	}
	if err := bootstrap.Write(e.bootPath, bootstrap.Config{Mesh: meshName, Name: self.Name, Service: service,
		XDSSocket: e.xdsSocket, AdminSocket: e.adminSock}); err != nil {
		return err
	}
	srvCtx, stopServer := context.WithCancel(context.Background())
	defer stopServer()
	srvDone := make(chan error, 1)
	go func() { srvDone <- e.server.Run(srvCtx) }()
	select {
	case <-e.server.Ready():
	case err := <-srvDone:
		return orStopped(err)
	case <-ctx.Done():
		stopServer()
		return <-srvDone
	}
	// `envoy --version` runs beside the start, not before it: it only informs the logs.
	versionDone := make(chan struct{})
	go func() {
		defer close(versionDone)
		if v, err := bootstrap.EnvoyVersion(e.sup.Binary); err == nil {
			e.log.Info("envoy found", "path", e.sup.Binary, "version", v)
		} else {
			e.log.Warn("envoy version unknown", "path", e.sup.Binary, "error", err)
		}
	}()
	defer func() { <-versionDone }()
	probeCtx, stopProbe := context.WithCancel(ctx)
	probeDone := make(chan struct{})
	go func() { defer close(probeDone); e.probe(probeCtx) }()
	defer func() { stopProbe(); <-probeDone }()
	supErr := e.sup.Run(ctx) // until ctx ends; Envoy is stopped when it returns
	stopServer()
	srvErr := <-srvDone
	if supErr != nil {
		return supErr
	}
	return srvErr
}

// Live: the xDS server listens, Envoy runs and its admin API says it is initialized.
func (e *envoyPart) Live() bool {
	select {
	case <-e.server.Ready():
		return e.sup.Live() && e.adminLive.Load()
	default:
		return false
	}
}

// probe asks Envoy's admin API for /ready every 20 ms until it is live, then every second
// (a crashed and restarted Envoy turns not live until it has its configuration again).
func (e *envoyPart) probe(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live := false
		if e.sup.Live() {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://envoy-admin/ready", nil)
			if resp, err := e.client.Do(req); err == nil {
				live = resp.StatusCode == http.StatusOK
				resp.Body.Close()
			}
		}
		if was := e.adminLive.Swap(live); was != live {
			e.log.Info("envoy readiness changed", "live", live)
		}
		if live {
			t.Reset(time.Second)
		} else {
			t.Reset(20 * time.Millisecond)
		}
	}
}

// Drain fails Envoy's health checks and waits the drain time (d is the same drain time the
// supervisor was given).
func (e *envoyPart) Drain(ctx context.Context, _ time.Duration) error {
	if !e.sup.Live() {
		return nil
	}
	return e.sup.Drain(ctx)
}

// hostHasIPv6 tells whether this network namespace (Envoy's too) can listen on [::], as
// the capture listeners then do.
func hostHasIPv6() bool {
	l, err := net.Listen("tcp6", "[::]:0")
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// envoyDump is /config_dump's "envoy" section: every resource in Envoy's own JSON form
// (protojson), secrets by name only (they hold keys).
type envoyDump struct{ r *xds.Resources }

func (d envoyDump) MarshalJSON() ([]byte, error) {
	conv := func(ms []proto.Message) ([]json.RawMessage, error) {
		out := make([]json.RawMessage, 0, len(ms))
		for _, m := range ms {
			b, err := protojson.Marshal(m)
			if err != nil {
				return nil, err
			}
			out = append(out, b)
		}
		return out, nil
	}
	var ls, cs, es []proto.Message
	for _, m := range d.r.Listeners {
		ls = append(ls, m)
	}
	for _, m := range d.r.Clusters {
		cs = append(cs, m)
	}
	for _, m := range d.r.Endpoints {
		es = append(es, m)
	}
	out := map[string]any{}
	var err error
	if out["listeners"], err = conv(ls); err != nil {
		return nil, err
	}
	if out["clusters"], err = conv(cs); err != nil {
		return nil, err
	}
	if out["endpoints"], err = conv(es); err != nil {
		return nil, err
	}
	secrets := make([]string, 0, len(d.r.Secrets))
	for _, s := range d.r.Secrets {
		secrets = append(secrets, s.Name)
	}
	out["secrets"] = secrets
	problems := make([]string, 0, len(d.r.Problems))
	for _, p := range d.r.Problems {
		problems = append(problems, p.String())
	}
	out["problems"] = problems
	out["conflicts"] = d.r.Conflicts
	return json.Marshal(out)
}
