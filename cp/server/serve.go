package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/kumadp/kuma-dp/cp/connlimit"
	"github.com/kumadp/kuma-dp/cp/diag"
	"github.com/kumadp/kuma-dp/cp/dirstore"
	"github.com/kumadp/kuma-dp/cp/fanout"
	"github.com/kumadp/kuma-dp/cp/token"
	"github.com/kumadp/kuma-dp/internal/buildinfo"
)

// Serve serves agents as c says until SIGINT or SIGTERM: the store first (a directory, or
// etcd and all it brings), then the agents' port, the diagnostics endpoint and the ready
// file, which names every address bound.
func Serve(c Config, log *slog.Logger) error {
	if err := c.Check(); err != nil {
		return err
	}
	key, creds, err := c.credentials(log)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	cp := fanout.New(key, log)
	st, err := c.startStore(ctx, cp, log)
	if err != nil {
		return err
	}
	ln, gs, err := c.listen(cp, creds)
	if err != nil {
		return err
	}
	ready := st.addrs(ln)
	if c.MetricsAddress != "" {
		if ready["metrics"], err = c.serveMetrics(ctx, cp, ln, st); err != nil {
			return err
		}
	}
	log.Info("kuma-cp serving", "address", ln.Addr().String(), "tls", creds != nil, "tokens", key != nil,
		"metrics", ready["metrics"], "max_connections", c.MaxConns, "max_connections_per_ip", c.MaxConnsPerIP,
		"api_max_connections", c.Store.APIHTTP.Total, "metrics_max_connections", c.Metrics.Total)
	if err := c.writeReady(ready); err != nil {
		return err
	}
	return cp.Serve(ctx, gs, ln)
}

// credentials reads the token key (nil: tokens are not checked) and the server's
// certificate (nil: plain text), warning of each left out.
func (c Config) credentials(log *slog.Logger) (key []byte, creds credentials.TransportCredentials, err error) {
	if c.TokenKeyFile != "" {
		if key, err = token.ReadKey(c.TokenKeyFile); err != nil {
			return nil, nil, err
		}
	} else {
		log.Warn("no --token-key-file: any agent is served, tokens are not checked")
	}
	if c.CertFile != "" || c.KeyFile != "" {
		if creds, err = credentials.NewServerTLSFromFile(c.CertFile, c.KeyFile); err != nil {
			return nil, nil, fmt.Errorf("--tls-cert-file %q / --tls-key-file %q: %w", c.CertFile, c.KeyFile, err)
		}
	} else {
		log.Warn("no --tls-cert-file: the link is plain text (agents use grpc://)")
	}
	return key, creds, nil
}

// stores is what the store runs beside the agents' server: etcd's parts (nil with --store
// dir) and the API's port (nil when not served).
type stores struct {
	etcd *etcdParts
	api  *connlimit.HTTP
}

// startStore starts the store and feeds cp from it.
func (c Config) startStore(ctx context.Context, cp *fanout.ControlPlane, log *slog.Logger) (stores, error) {
	if c.Store.Kind == "etcd" {
		p, err := c.Store.start(ctx, cp, log)
		if err != nil {
			return stores{}, err
		}
		return stores{etcd: p, api: p.api}, nil
	}
	st := dirstore.New(c.ResourcesDir, !c.SkipValidation, log)
	sv, _ := st.Scan()
	cp.Apply(sv)
	log.Info("resources loaded", "dir", c.ResourcesDir, "resources", sv.Count(), "meshes", sv.Meshes())
	go st.Watch(ctx, cp, c.Poll)
	if c.Store.AdminTokenFile == "" {
		return stores{}, nil
	}
	port, err := c.serveDirAPI(ctx, cp, log)
	return stores{api: port}, err
}

// listen binds the agents' port, behind its connection limits, and makes the gRPC server.
func (c Config) listen(cp *fanout.ControlPlane, creds credentials.TransportCredentials) (*connlimit.Listener, *grpc.Server, error) {
	raw, err := net.Listen("tcp", c.Address)
	if err != nil {
		return nil, nil, fmt.Errorf("--address %q: %w", c.Address, err)
	}
	ln := connlimit.Wrap(raw, connlimit.Limits{Total: c.MaxConns, PerIP: c.MaxConnsPerIP})
	cp.HandshakeFails = &ln.Stats.HandshakeFails
	maxAge := c.MaxConnAge
	if maxAge <= 0 {
		maxAge = time.Duration(1<<63 - 1) // gRPC's "infinity"
	}
	cp.AgentKeepalive = c.AgentKeepalive
	return ln, cp.GRPCServer(creds, c.HandshakeTimeout, maxAge), nil
}

// addrs are the ready file's addresses: the agents' port, the API's and the DNS's when
// served.
func (s stores) addrs(ln net.Listener) map[string]string {
	ready := map[string]string{"address": ln.Addr().String()}
	if s.api != nil {
		ready["api"] = s.api.Addr().String()
	}
	if s.etcd != nil && s.etcd.dnsAddr != "" {
		ready["dns"] = s.etcd.dnsAddr
	}
	return ready
}

// serveMetrics serves the diagnostics endpoint (/metrics, /ready, /healthz) and returns its
// address.
func (c Config) serveMetrics(ctx context.Context, cp *fanout.ControlPlane, ln *connlimit.Listener, s stores) (string, error) {
	reg := prometheus.NewRegistry()
	// the process's CPU, memory and goroutines, as kuma-dp exports them (the dashboards'
	// panels, deploy/grafana)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(ln.Collectors("kuma_cp")...)
	reg.MustRegister(buildinfo.Collector("kuma_cp"))
	reg.MustRegister(cp.Collector())
	if s.api != nil {
		reg.MustRegister(s.api.Collectors("kuma_cp_api")...)
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "kuma_cp_agents_connected", Help: "Agents with an open stream."},
		func() float64 { return float64(cp.Connected()) }))
	readyFn := func() error { return nil }
	if s.etcd != nil {
		s.etcd.register(reg)
		readyFn = s.etcd.ready
	}
	d, err := diag.New(c.MetricsAddress, c.Metrics, reg, readyFn, c.MetricsPprof)
	if err != nil {
		return "", err
	}
	go d.Run(ctx)
	return d.Addr().String(), nil
}

// writeReady writes the addresses bound to --ready-file, if given.
func (c Config) writeReady(ready map[string]string) error {
	if c.ReadyFile == "" {
		return nil
	}
	b, _ := json.Marshal(ready)
	if err := os.WriteFile(c.ReadyFile, b, 0o644); err != nil {
		return fmt.Errorf("--ready-file %q: %w", c.ReadyFile, err)
	}
	return nil
}
