package agent

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kumadp/kuma-dp/cplink"
	"github.com/kumadp/kuma-dp/internal/buildinfo"
	"github.com/kumadp/kuma-dp/vipalloc"
)

// metrics are the agent's own: reloads, the table, readiness. DNS metrics come from the
// resolver's handler and are served on the same /metrics.
type metrics struct {
	reg           *prometheus.Registry
	reloads       *prometheus.CounterVec
	reloadSeconds prometheus.Histogram
	envoyFailures prometheus.Counter
	entries       *prometheus.GaugeVec
	poolUsed      *prometheus.GaugeVec
	poolSize      *prometheus.GaugeVec
	exhausted     prometheus.Gauge
}

func newMetrics(a *Agent) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kuma_dp_model_reloads_total",
			Help: "Model loads by result: applied, zones (only the route zones changed: DNS took them), unchanged (same content), refused (invalid; the last good model stays).",
		}, []string{"result"}),
		reloadSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "kuma_dp_model_reload_duration_seconds",
			Help:    "Time from reading the files to the new table served by DNS (and Envoy resources published).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14),
		}),
		envoyFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "kuma_dp_envoy_update_failures_total",
			Help: "Models whose Envoy resources were refused (Envoy keeps the last good ones).",
		}),
		entries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kuma_dp_vip_entries",
			Help: "Hostnames in the VIP table, by status (Available, NotAvailable).",
		}, []string{"status"}),
		poolUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kuma_dp_vip_pool_used",
			Help: "VIPs allocated from each pool (service: 240.0.0.0/4, external: MeshExternalService pool).",
		}, []string{"pool"}),
		poolSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "kuma_dp_vip_pool_size",
			Help: "IPv4 VIPs each pool holds (kuma_dp_vip_pool_used / kuma_dp_vip_pool_size is its use).",
		}, []string{"pool"}),
		exhausted: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "kuma_dp_vip_pool_exhausted_entries",
			Help: "Hostnames left without a VIP because their pool is full.",
		}),
	}
	for _, r := range []string{"applied", "unchanged", "refused"} {
		m.reloads.WithLabelValues(r)
	}
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kuma_dp_ready", Help: "1 when /ready answers 200.",
	}, func() float64 {
		if ok, _ := a.readiness(); ok {
			return 1
		}
		return 0
	})
	stale := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kuma_dp_model_stale",
		Help: "1 while the model served is the one saved at the last sync, the control plane not reached since the start.",
	}, func() float64 {
		if a.stale.Load() {
			return 1
		}
		return 0
	})
	refusedFiles := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "kuma_dp_model_files_refused",
		Help: "Files of the policies directory whose newest content was refused: each is served at its last good version, or left out when it has none (the log names field and value).",
	}, func() float64 { return float64(a.refusedFiles.Load()) })
	saveFailures := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "kuma_dp_model_save_failures_total",
		Help: "Writes of the control plane's model to the work dir (cp-model.gob, what a restart during an outage serves) that failed; the log says why, once per episode.",
	}, func() float64 {
		if s, ok := a.parts.Source.(modelSaver); ok {
			return float64(s.ModelSaveFailures())
		}
		return 0
	})
	for pool, size := range a.parts.PoolSizes {
		m.poolSize.WithLabelValues(pool).Set(size)
	}
	m.reg.MustRegister(m.reloads, m.reloadSeconds, m.envoyFailures, m.entries, m.poolUsed, m.poolSize, m.exhausted, ready, stale, refusedFiles, saveFailures,
		buildinfo.Collector("kuma_dp"), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// modelSaver is a source that saves its model for a restart (the control-plane link).
type modelSaver interface{ ModelSaveFailures() uint64 }

// observeTable updates the table gauges after a swap.
func (m *metrics) observeTable(t *vipalloc.Table) {
	var avail, notAvail, service, external, exhausted float64
	for _, e := range t.Entries() {
		if e.Status != vipalloc.Available {
			notAvail++
			if isExhaustion(e.Reason()) {
				exhausted++
			}
			continue
		}
		avail++
		if e.MeshExternalService() != "" {
			external++
		} else {
			service++
		}
	}
	m.entries.WithLabelValues(vipalloc.Available.String()).Set(avail)
	m.entries.WithLabelValues(vipalloc.NotAvailable.String()).Set(notAvail)
	m.poolUsed.WithLabelValues("service").Set(service)
	m.poolUsed.WithLabelValues("external").Set(external)
	m.exhausted.Set(exhausted)
}

func isExhaustion(reason string) bool {
	r := strings.ToLower(reason)
	return strings.Contains(r, "pool") && (strings.Contains(r, "full") || strings.Contains(r, "exhaust"))
}

// handler serves the agent's metrics followed by the resolver's, as one text exposition.
func (m *metrics) handler(dns http.Handler) http.Handler {
	own := promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Both parts are asked for the text format so they can be concatenated.
		r = r.Clone(r.Context())
		r.Header.Set("Accept", "text/plain; version=0.0.4")
		r.Header.Del("Accept-Encoding")
		var body bytes.Buffer
		rec := httptest.NewRecorder()
		own.ServeHTTP(rec, r)
		body.Write(rec.Body.Bytes())
		if dns != nil {
			rec = httptest.NewRecorder()
			dns.ServeHTTP(rec, r)
			if rec.Code == http.StatusOK {
				body.Write(rec.Body.Bytes())
			}
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(body.Bytes())
	})
}

var _ modelSaver = (*cplink.Client)(nil)
