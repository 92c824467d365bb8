package agent

import (
	"context"
	"net"
	"net/http"
	"time"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/mesh"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// The seams between the agent and the parts it composes. Each is the small slice of a
// part's API the agent uses; the concrete types live in their own packages.

// Allocator turns a model into this dataplane's VIP table (vipalloc.Allocator); Flush
// writes what it keeps across restarts now (the agent stops).
type Allocator interface {
	Allocate(*mesh.Snapshot) (*vipalloc.Table, error)
	Flush()
}

// DNS is the embedded resolver (dnsserver.Server).
type DNS interface {
	Swap(*vipalloc.Table)
	Run(ctx context.Context) error
	Ready() <-chan struct{}
	Addrs() (udp, tcp []net.Addr)
	MetricsHandler() http.Handler
}

// Envoy is the local xDS server plus the Envoy process it feeds, as one part.
type Envoy interface {
	// Update generates Envoy's resources for a model and publishes them; it returns them
	// (for /config_dump) or the reason they were refused, leaving the last good ones served.
	Update(*mesh.Snapshot, *vipalloc.Table) (resources any, err error)
	// Run serves xDS and supervises Envoy until ctx is cancelled.
	Run(ctx context.Context) error
	// Live reports whether Envoy is up and has taken its configuration.
	Live() bool
	// Drain makes Envoy fail its health checks and drain connections for d (or until ctx
	// is cancelled).
	Drain(ctx context.Context, d time.Duration) error
}

// TransparentProxy is the iptables redirection `run --transparent-proxy` installs at start
// and, when asked, removes at exit (tproxy.Install / tproxy.Uninstall).
type TransparentProxy interface {
	Install(ctx context.Context) error
	Uninstall(ctx context.Context) error
}

// Parts is what New composes. Envoy and TransparentProxy may be nil.
type Parts struct {
	Source           cplink.Source
	Allocator        Allocator
	DNS              DNS
	Envoy            Envoy
	TransparentProxy TransparentProxy
	// PoolSizes is the number of IPv4 VIPs of each pool ("service", "external"), for
	// /metrics; may be nil.
	PoolSizes map[string]float64
}
