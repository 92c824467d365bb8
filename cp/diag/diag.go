// Package diag is the control plane's diagnostics endpoint (Kuma's port 5680): /metrics in
// Prometheus format, /healthz (the process serves), /ready (it can serve agents) and, when
// asked, Go's profiles under /debug/pprof/. It owns the HTTP server only; what is measured
// and what "ready" means come from its caller.
package diag

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kumadp/kuma-dp/cp/connlimit"
)

// Server serves the diagnostics endpoint on its port (limited as connlimit.HTTPConfig says).
type Server struct {
	port *connlimit.HTTP
}

// New binds addr (port 0: any free port, see Addr) within cfg. ready returns nil when the
// control plane can serve agents, else why not. The port's connection counters are
// registered in reg as kuma_cp_metrics_connections_*. With profiles, Go's profiles (heap,
// CPU, goroutines...) are served under /debug/pprof/.
func New(addr string, cfg connlimit.HTTPConfig, reg *prometheus.Registry, ready func() error, profiles bool) (*Server, error) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "OK") })
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "NOT READY:", err)
			return
		}
		fmt.Fprintln(w, "READY")
	})
	index := "/metrics  Prometheus metrics\n/ready    200 once agents can be served\n/healthz  200 while the process serves"
	if profiles {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		index += "\n/debug/pprof/  Go's profiles (--metrics-pprof)"
	}
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, index) })
	port, err := connlimit.ListenHTTP(addr, cfg, mux)
	if err != nil {
		return nil, fmt.Errorf("--metrics-address %q: %w", addr, err)
	}
	if err := registerAll(reg, port.Collectors("kuma_cp_metrics")); err != nil {
		port.Close()
		return nil, err
	}
	return &Server{port: port}, nil
}

func registerAll(reg *prometheus.Registry, cs []prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Addr is the bound address.
func (s *Server) Addr() net.Addr { return s.port.Addr() }

// Run serves until ctx is cancelled.
func (s *Server) Run(ctx context.Context) error { return s.port.Serve(ctx) }
