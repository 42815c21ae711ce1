package vllm

import (
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// histogramSpec names one request histogram and its bucket bounds.
type histogramSpec struct {
	name, help string
	buckets    []float64
}

// histogramSet holds every per-request histogram behind one lock: a request
// records its thirteen observations in one critical section, where
// prometheus.Histogram would take about four atomic operations each, and on
// a busy fake those cache lines bounce between cores. A scrape reads them
// as constant histograms, so /metrics prints what the client library's
// histograms print.
type histogramSet struct {
	specs [numHists]histogramSpec
	descs [numHists]*prometheus.Desc

	mu     sync.Mutex
	counts [numHists][]uint64 // per bucket, not cumulative; the last is +Inf
	sums   [numHists]float64
	totals [numHists]uint64
}

func newHistogramSet(labels prometheus.Labels, specs [numHists]histogramSpec) *histogramSet {
	h := &histogramSet{specs: specs}
	for i, sp := range specs {
		h.descs[i] = prometheus.NewDesc(sp.name, sp.help, nil, labels)
		h.counts[i] = make([]uint64, len(sp.buckets)+1)
	}
	return h
}

// observe records v[i] in histogram i, except those whose bit is set in skip.
func (h *histogramSet) observe(v *[numHists]float64, skip uint) {
	var at [numHists]int
	for i := range v {
		at[i] = sort.SearchFloat64s(h.specs[i].buckets, v[i]) // the first bound >= v: Prometheus's le
	}
	h.mu.Lock()
	for i := range v {
		if skip&(1<<i) != 0 {
			continue
		}
		h.counts[i][at[i]]++
		h.sums[i] += v[i]
		h.totals[i]++
	}
	h.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (h *histogramSet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range h.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (h *histogramSet) Collect(ch chan<- prometheus.Metric) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, sp := range h.specs {
		cumulative := make(map[float64]uint64, len(sp.buckets))
		var n uint64
		for b, bound := range sp.buckets {
			n += h.counts[i][b]
			cumulative[bound] = n
		}
		ch <- prometheus.MustNewConstHistogram(h.descs[i], h.totals[i], h.sums[i], cumulative)
	}
}
