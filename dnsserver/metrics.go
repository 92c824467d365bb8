package dnsserver

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// The query types counted by name; everything else is "other" (bounded label values).
var typeNames = map[uint8]string{
	1: "A", 28: "AAAA", 12: "PTR", 5: "CNAME", 33: "SRV", 16: "TXT", 15: "MX", 2: "NS",
	6: "SOA", 65: "HTTPS", 64: "SVCB", 255: "ANY",
}

const (
	srcLocal = iota
	srcUpstream
)

// metrics are one server's own collectors, in its own registry (several servers may live
// in one process, e.g. in tests). Counters used per query are resolved once, here, so the
// hot path only does an atomic add.
type metrics struct {
	reg       *prometheus.Registry
	entries   prometheus.Gauge
	swaps     prometheus.Counter
	upFail    prometheus.Counter
	truncated prometheus.Counter
	answers   [2][256]prometheus.Counter // by source, then query type ("other" where unnamed)
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.entries = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kuma_dp_dns_table_entries", Help: "Hostnames the resolver answers from its table.",
	})
	m.swaps = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kuma_dp_dns_table_swaps_total", Help: "Tables swapped in.",
	})
	m.upFail = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kuma_dp_dns_upstream_failures_total",
		Help: "Queries for other names that got no upstream answer (answered SERVFAIL).",
	})
	m.truncated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "kuma_dp_dns_truncated_total", Help: "Local answers sent with TC (did not fit the client's buffer).",
	})
	answers := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kuma_dp_dns_answers_total",
		Help: "Answers by query type and source (local: from the VIP table; upstream: cache or forward).",
	}, []string{"type", "source"})
	m.reg.MustRegister(m.entries, m.swaps, m.upFail, m.truncated, answers)
	for src, name := range []string{"local", "upstream"} {
		other := answers.WithLabelValues("other", name)
		for t := range m.answers[src] {
			m.answers[src][t] = other
		}
		for t, tn := range typeNames {
			m.answers[src][t] = answers.WithLabelValues(tn, name)
		}
	}
	return m
}

func (m *metrics) answer(src int, qtype uint16) {
	if qtype > 255 {
		qtype = 0 // counted as "other"
	}
	m.answers[src][qtype].Inc()
}

// handler serves our metrics plus CoreDNS's own (the coredns_* families its plugins
// register in the default registry: cache, forward, panics, ...).
func (m *metrics) handler() http.Handler {
	g := prometheus.Gatherers{m.reg, prefixGatherer{prometheus.DefaultGatherer, "coredns_"}}
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// prefixGatherer keeps the families whose name starts with prefix, so the Go runtime and
// process collectors of the default registry are not exported twice when the agent's own
// endpoint serves them.
type prefixGatherer struct {
	g      prometheus.Gatherer
	prefix string
}

func (p prefixGatherer) Gather() ([]*dto.MetricFamily, error) {
	all, err := p.g.Gather()
	out := all[:0]
	for _, f := range all {
		if strings.HasPrefix(f.GetName(), p.prefix) {
			out = append(out, f)
		}
	}
	return out, err
}
