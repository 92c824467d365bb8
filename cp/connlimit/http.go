package connlimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTPConfig is what bounds one of the control plane's HTTP ports (the API, the
// diagnostics endpoint): its connections (in all, per client IP) and how long a client may
// hold one without using it.
type HTTPConfig struct {
	Limits
	// HeaderTimeout: a request's line and headers not received by then close the
	// connection (a client that connects and sends nothing, or a byte at a time).
	HeaderTimeout time.Duration
	// IdleTimeout: a keep-alive connection without a new request for this long is closed.
	// Without it, 19,980 idle connections (one GET /status each) were held until the
	// process ran out of descriptors, its agents' port with it.
	IdleTimeout time.Duration
}

// Defaults of the HTTP ports: far below the agents' port, whose share of the descriptors
// is what the others leave (Share).
var (
	DefaultAPI     = HTTPConfig{Limits: Limits{Total: 1024, PerIP: 256}, HeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
	DefaultMetrics = HTTPConfig{Limits: Limits{Total: 64, PerIP: 16}, HeaderTimeout: 5 * time.Second, IdleTimeout: 60 * time.Second}
)

// HTTP is one HTTP port: its listener, limited, and its server, with the timeouts. A
// request's body is the handler's to bound (it may stream: Server-Sent Events), so there
// is no read or write timeout on the whole request.
type HTTP struct {
	*Listener
	Server *http.Server
}

// ListenHTTP binds addr (port 0: any free port, see Addr) to serve h within cfg.
func ListenHTTP(addr string, cfg HTTPConfig, h http.Handler) (*HTTP, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &HTTP{Listener: Wrap(ln, cfg.Limits),
		Server: &http.Server{Handler: h, ReadHeaderTimeout: cfg.HeaderTimeout, IdleTimeout: cfg.IdleTimeout}}, nil
}

// Serve serves until ctx ends, then shuts down (requests running get 2 s).
func (s *HTTP) Serve(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Server.Serve(s.Listener) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.Server.Shutdown(sctx)
		<-errc
		return nil
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	}
}

// Collectors are the port's connection counters named <prefix>_connections_* (no
// handshake counter: HTTP has none of its own).
func (s *HTTP) Collectors(prefix string) []prometheus.Collector { return s.connCollectors(prefix) }

// Reserve is the descriptors Share keeps for the process's own files, etcd and DNS.
const Reserve = 256

// Share splits the open-files limit (nofile) between the ports, for the limits not given:
// Reserve for the process itself; each HTTP port (api, metrics) keeps its Total, made
// smaller when nofile is small (at most an eighth of what is left for the API, a
// thirty-second for the metrics); the agents' port takes what remains, at most 16384 and
// at least 64. Flooding the HTTP ports to their limits then never leaves the agents' port
// without descriptors. given says which limits the operator set (kept as they are).
func Share(nofile uint64, agents *int, api, metrics *Limits, given func(string) bool) {
	avail := int64(nofile) - Reserve
	fit := func(total *int, flag string, part int64) {
		if !given(flag) && *total > 0 && int64(*total) > avail/part {
			*total = int(max(avail/part, 1))
		}
	}
	fit(&api.Total, "api-max-connections", 8)
	fit(&metrics.Total, "metrics-max-connections", 32)
	if !given("max-connections") {
		*agents = int(max(64, min(avail-int64(api.Total)-int64(metrics.Total), 16384)))
	}
}

// Check refuses limits that cannot work, naming the flag (prefix: "--api-", "--metrics-").
func (c HTTPConfig) Check(prefix string) error {
	switch {
	case c.Total < 0:
		return fmt.Errorf("%smax-connections %d: want 0 (no limit) or more", prefix, c.Total)
	case c.PerIP < 0:
		return fmt.Errorf("%smax-connections-per-ip %d: want 0 (no limit) or more", prefix, c.PerIP)
	case c.HeaderTimeout <= 0:
		return fmt.Errorf("--http-header-timeout %v: want more than 0", c.HeaderTimeout)
	case c.IdleTimeout <= 0:
		return fmt.Errorf("--http-idle-timeout %v: want more than 0", c.IdleTimeout)
	}
	return nil
}
