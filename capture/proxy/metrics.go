package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the proxy's Prometheus series, registered on the proxy's own
// registry so that several proxies can live in one process.
type metrics struct {
	calls           *prometheus.CounterVec // by api and mode
	captured        prometheus.Counter
	incomplete      *prometheus.CounterVec // by reason
	storeLatency    *prometheus.HistogramVec
	upstreamLatency prometheus.Histogram
	trackedRollouts prometheus.Gauge
}

// Label values of the calls counter's mode label.
const (
	modeTraining = "training"
	modeSummary  = "summary"
	modePlain    = "plain"
)

func newMetrics(reg *prometheus.Registry) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capbench_proxy_calls_total",
			Help: "Model calls received, by API and capture mode (training, summary, plain).",
		}, []string{"api", "mode"}),
		captured: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "capbench_proxy_captured_total",
			Help: "Model calls whose token record was written to the store.",
		}),
		incomplete: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "capbench_proxy_incomplete_total",
			Help: "Rollouts marked incomplete, by reason.",
		}, []string{"reason"}),
		storeLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "capbench_proxy_store_seconds",
			Help:    "Latency of store operations (begin_call, sync_intents, put, mark_incomplete, read).",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}, []string{"op"}),
		upstreamLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "capbench_proxy_upstream_seconds",
			Help:    "Latency of upstream model requests, headers to complete body.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}),
		trackedRollouts: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "capbench_proxy_tracked_rollouts",
			Help: "Rollouts whose lineage index the proxy holds in memory (bounded by MaxTrackedRollouts).",
		}),
	}
	for _, c := range []prometheus.Collector{m.calls, m.captured, m.incomplete, m.storeLatency, m.upstreamLatency, m.trackedRollouts} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
