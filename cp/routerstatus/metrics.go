package routerstatus

import (
	"maps"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// RouterKey names a router.
type RouterKey struct{ Mesh, Name string }

// Counts are a router's replicas as its status last said: desired, ready, not ready.
type Counts struct{ Desired, Ready, NotReady int }

// Metrics holds the replicas of every router as the leader's last pass computed them, and
// exposes them as kuma_cp_router_replicas{mesh, router, state} (state desired, ready,
// not_ready). A replica that is not the leader has none.
type Metrics struct {
	mu     sync.Mutex
	counts map[RouterKey]Counts
}

// Counts are the routers' replicas now (a copy).
func (m *Metrics) Counts() map[RouterKey]Counts {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.counts)
}

func (m *Metrics) set(c map[RouterKey]Counts) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.counts = c
	m.mu.Unlock()
}

var replicasDesc = prometheus.NewDesc("kuma_cp_router_replicas",
	"A router's replicas by state (desired, ready, not_ready), as its status says and its DNS serves them (the leader only).",
	[]string{"mesh", "router", "state"}, nil)

func (m *Metrics) Describe(ch chan<- *prometheus.Desc) { ch <- replicasDesc }

func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for k, c := range m.Counts() {
		for state, n := range map[string]int{"desired": c.Desired, "ready": c.Ready, "not_ready": c.NotReady} {
			ch <- prometheus.MustNewConstMetric(replicasDesc, prometheus.GaugeValue, float64(n), k.Mesh, k.Name, state)
		}
	}
}
