package proxy

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/capbench/capbench/capture/store"
)

// diskStatser is a store that reports its disk (the file store does).
type diskStatser interface {
	DiskStats() (store.DiskStats, error)
}

// diskCollector reads the store's disk figures at scrape time.
type diskCollector struct {
	st                    diskStatser
	free, total, failures *prometheus.Desc
}

// registerDiskMetrics exports the capture disk's free space and the store's
// write failures when the store can report them.
func registerDiskMetrics(reg *prometheus.Registry, st Store) error {
	ds, ok := st.(diskStatser)
	if !ok {
		return nil
	}
	return reg.Register(&diskCollector{
		st: ds,
		free: prometheus.NewDesc("capbench_proxy_capture_disk_free_bytes",
			"Bytes free (to unprivileged users) on the file system holding the capture directory.", nil, nil),
		total: prometheus.NewDesc("capbench_proxy_capture_disk_size_bytes",
			"Size of the file system holding the capture directory.", nil, nil),
		failures: prometheus.NewDesc("capbench_proxy_capture_write_failures_total",
			"Writes to the capture directory that failed, by cause (disk_full: no space or quota; other).", []string{"cause"}, nil),
	})
}

func (c *diskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.free
	ch <- c.total
	ch <- c.failures
}

func (c *diskCollector) Collect(ch chan<- prometheus.Metric) {
	ds, err := c.st.DiskStats()
	if err == nil {
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(ds.FreeBytes))
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(ds.TotalBytes))
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(ds.DiskFullFailures), "disk_full")
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(ds.WriteFailures-ds.DiskFullFailures), "other")
}
