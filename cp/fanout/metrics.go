package fanout

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector is the link's traffic as Prometheus metrics.
func (cp *ControlPlane) Collector() prometheus.Collector { return linkCollector{cp} }

// linkCollector exposes the link's traffic: responses pushed, ACKs, NACKs by kind.
type linkCollector struct{ cp *ControlPlane }

var (
	pushesDesc = prometheus.NewDesc("kuma_cp_pushes_total", "Responses (changes) pushed to agents.", nil, nil)
	acksDesc   = prometheus.NewDesc("kuma_cp_acks_total", "Changes agents accepted.", nil, nil)
	firstDesc  = prometheus.NewDesc("kuma_cp_first_syncs_waiting", "Agents waiting their turn for a first sync (a kind's full answer), served in arrival order.", nil, nil)
	expireDesc = prometheus.NewDesc("kuma_cp_first_syncs_expired_total", "First syncs whose agent neither acknowledged nor left within the hold (30 s): their share of the budget was given back without an ACK.", nil, nil)
	silentDesc = prometheus.NewDesc("kuma_cp_agents_silent", "Agents with an open stream that were not heard from for twice --agent-keepalive (frozen, cut off or starved): they do not count as connected until they answer.", nil, nil)
	nacksDesc  = prometheus.NewDesc("kuma_cp_nacks_total", "Changes agents refused (they keep their last good model), by resource kind.", []string{"kind"}, nil)
)

func (c linkCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- pushesDesc
	ch <- acksDesc
	ch <- nacksDesc
	ch <- firstDesc
	ch <- expireDesc
	ch <- silentDesc
}

func (c linkCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(pushesDesc, prometheus.CounterValue, float64(c.cp.pushes.Load()))
	ch <- prometheus.MustNewConstMetric(acksDesc, prometheus.CounterValue, float64(c.cp.acks.Load()))
	ch <- prometheus.MustNewConstMetric(firstDesc, prometheus.GaugeValue, float64(c.cp.first.waiting.Load()))
	ch <- prometheus.MustNewConstMetric(expireDesc, prometheus.CounterValue, float64(c.cp.first.expired.Load()))
	ch <- prometheus.MustNewConstMetric(silentDesc, prometheus.GaugeValue, float64(c.cp.silent.Load()))
	c.cp.nacks.Range(func(k, v any) bool {
		ch <- prometheus.MustNewConstMetric(nacksDesc, prometheus.CounterValue, float64(v.(*atomic.Uint64).Load()), k.(string))
		return true
	})
}
