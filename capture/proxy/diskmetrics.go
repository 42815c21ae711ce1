package proxy

import (
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/capbench/capbench/capture/store"
)

// diskStatser is a store that reports its disk (the file store does).
type diskStatser interface {
	DiskStats() (store.DiskStats, error)
}

// diskCollector reads the store's disk figures at scrape time.
type diskCollector struct {
	st                           diskStatser
	free, total, failures        *prometheus.Desc
	appends, syncs, syncDuration *prometheus.Desc
}

// registerDiskMetrics exports the capture disk's free space, the store's
// write failures and its syncs when the store can report them. Appends over
// syncs is how many calls a sync covered; sync seconds per second near 1
// says the disk's sync rate bounds the captured calls a second.
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
		appends: prometheus.NewDesc(MetricSyncedAppends,
			"Appends to the capture directory made durable, each by one sync: records, and intents synced on their own (a streamed call's, or one whose call has no record).", nil, nil),
		syncs: prometheus.NewDesc(MetricSyncs,
			"Syncs that made those appends durable, by kind (file_system: a group's syncfs; file: one file's fdatasync).", []string{"kind"}, nil),
		syncDuration: prometheus.NewDesc(MetricSyncSeconds,
			"Wall time spent in those syncs, summed over syncs running at once.", nil, nil),
	})
}

func (c *diskCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.free
	ch <- c.total
	ch <- c.failures
	ch <- c.appends
	ch <- c.syncs
	ch <- c.syncDuration
}

func (c *diskCollector) Collect(ch chan<- prometheus.Metric) {
	ds, err := c.st.DiskStats()
	if err == nil {
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(ds.FreeBytes))
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(ds.TotalBytes))
	}
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(ds.DiskFullFailures), "disk_full")
	ch <- prometheus.MustNewConstMetric(c.failures, prometheus.CounterValue, float64(ds.WriteFailures-ds.DiskFullFailures), "other")
	sy := ds.Syncs
	ch <- prometheus.MustNewConstMetric(c.appends, prometheus.CounterValue, float64(sy.Appends))
	ch <- prometheus.MustNewConstMetric(c.syncs, prometheus.CounterValue, float64(sy.FileSystemSyncs), "file_system")
	ch <- prometheus.MustNewConstMetric(c.syncs, prometheus.CounterValue, float64(sy.FileSyncs), "file")
	ch <- prometheus.MustNewConstMetric(c.syncDuration, prometheus.CounterValue, sy.Busy.Seconds())
}

// The names the capture store's sync counters are exported under.
const (
	MetricSyncedAppends = "capbench_proxy_capture_synced_appends_total"
	MetricSyncs         = "capbench_proxy_capture_syncs_total"
	MetricSyncSeconds   = "capbench_proxy_capture_sync_seconds_total"
)

// ParseSyncMetrics reads the capture store's sync counters from a proxy's
// /metrics text. ok is false when the page has none: the proxy's store is
// not a file store, or the page is not a capture proxy's.
func ParseSyncMetrics(r io.Reader) (st store.SyncStats, ok bool, err error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return st, false, fmt.Errorf("proxy: parse /metrics: %w", err)
	}
	appends, ok := fams[MetricSyncedAppends]
	if !ok {
		return st, false, nil
	}
	st.Appends = uint64(counterSum(appends, ""))
	if f := fams[MetricSyncs]; f != nil {
		st.FileSystemSyncs = uint64(counterSum(f, "file_system"))
		st.FileSyncs = uint64(counterSum(f, "file"))
	}
	if f := fams[MetricSyncSeconds]; f != nil {
		st.Busy = time.Duration(counterSum(f, "") * float64(time.Second))
	}
	return st, true, nil
}

// counterSum sums f's counters, only those whose kind label is kind when
// kind is set.
func counterSum(f *dto.MetricFamily, kind string) float64 {
	var v float64
	for _, m := range f.GetMetric() {
		if kind != "" && labelValue(m, "kind") != kind {
			continue
		}
		v += m.GetCounter().GetValue()
	}
	return v
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
