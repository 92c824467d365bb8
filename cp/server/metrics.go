package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kumadp/kuma-dp/cp/api"
	"github.com/kumadp/kuma-dp/cp/decoded"
	"github.com/kumadp/kuma-dp/cp/routesched"
)

// register adds the store's, the API's writes' and the leader's metrics to reg.
func (p *etcdParts) register(reg *prometheus.Registry) {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	b := func(v bool) float64 {
		if v {
			return 1
		}
		return 0
	}
	reg.MustRegister(
		gauge("kuma_cp_leader", "1 while this replica is the leader.", func() float64 { return b(p.leader.Load()) }),
		gauge("kuma_cp_store_revision", "The store revision served to agents.", func() float64 { return float64(p.feed.Revision()) }),
		gauge("kuma_cp_store_revision_seen", "The last store revision seen on the watch (served or not yet).", func() float64 { return float64(p.feed.SeenRevision()) }),
		gauge("kuma_cp_watch_lag_revisions", "Store revisions seen on the watch and not yet served to agents.", func() float64 { n, _ := p.feed.Lag(); return float64(n) }),
		gauge("kuma_cp_watch_lag_seconds", "How long the oldest change seen on the watch has waited to be served to agents (0 when caught up).", func() float64 { _, d := p.feed.Lag(); return d.Seconds() }),
		gauge("kuma_cp_store_synced", "1 while the store is read and its changes followed (a quorum of etcd reached) and the routers' zones built from it are served; 0 before, and while it is not (/ready says why).", func() float64 { return b(p.ready() == nil) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_store_documents_decoded_total", Help: "Stored documents decoded by the replica's followers of the store (the agents' feed, the routers' zones and status), once per version between them."}, func() float64 { return float64(decoded.Count()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_store_unreadable_keys_total", Help: "Keys under the store's prefix found holding no resource (skipped; each version counted once, logged once)."}, func() float64 { return float64(p.st.Unreadable()) }),
		writesCollector{p.apiSrv},
		gauge("kuma_cp_routes_pending", "Routes not scheduled yet (leader only; the reason is in each route's status).", func() float64 { return float64(p.routes.Pending.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_routes_scheduled_total", Help: "Route bindings made by this replica while leader."}, func() float64 { return float64(p.routes.Scheduled.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_routes_rescheduled_total", Help: "Route bindings removed to schedule the route again (relabel, host change, router deleted)."}, func() float64 { return float64(p.routes.Rescheduled.Load()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "kuma_cp_route_mass_unbinding_slowed_total", Help: "Scheduling passes that undid a router's bindings in steps (more than half of them at once)."}, func() float64 { return float64(p.routes.MassUnbindSlowed.Load()) }),
		routeFailures{&p.routes},
		&p.routers,
	)
}

// writesCollector exposes the API's writes by status code.
type writesCollector struct{ s *api.Server }

var writesDesc = prometheus.NewDesc("kuma_cp_api_writes_total", "Writes through the API by HTTP status code.", []string{"code"}, nil)

func (w writesCollector) Describe(ch chan<- *prometheus.Desc) { ch <- writesDesc }
func (w writesCollector) Collect(ch chan<- prometheus.Metric) {
	for code, n := range w.s.Writes() {
		ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(n), fmt.Sprint(code))
	}
}

// routeFailures exposes scheduling failures by reason.
type routeFailures struct{ m *routesched.Metrics }

var routeFailuresDesc = prometheus.NewDesc("kuma_cp_route_scheduling_failures_total", "Failed attempts to schedule a route, by reason.", []string{"reason"}, nil)

func (r routeFailures) Describe(ch chan<- *prometheus.Desc) { ch <- routeFailuresDesc }
func (r routeFailures) Collect(ch chan<- prometheus.Metric) {
	for reason, n := range r.m.Failures() {
		ch <- prometheus.MustNewConstMetric(routeFailuresDesc, prometheus.CounterValue, float64(n), reason)
	}
}
