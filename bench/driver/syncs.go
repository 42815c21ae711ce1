package driver

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

// syncReading is one read of the capture proxy's sync counters.
type syncReading struct {
	st store.SyncStats
	at time.Time
}

// readSyncs reads the sync counters from the capture proxy at root; ok is
// false when it has none (no proxy, a store that does not sync, or a
// /metrics that cannot be read: the run goes on without the figure).
func readSyncs(ctx context.Context, client *http.Client, root string) (syncReading, bool) {
	if root == "" {
		return syncReading{}, false
	}
	var st store.SyncStats
	var ok bool
	err := bench.ReadMetrics(ctx, client, bench.NormalizeBase(root)+"/metrics", func(r io.Reader) (err error) {
		st, ok, err = proxy.ParseSyncMetrics(r)
		return err
	})
	return syncReading{st: st, at: time.Now()}, ok && err == nil
}

// captureSyncs is what the syncs did from before to after.
func captureSyncs(before, after syncReading) (*bench.CaptureSyncs, error) {
	a, b := after.st, before.st
	if a.Appends < b.Appends || a.FileSystemSyncs < b.FileSystemSyncs || a.FileSyncs < b.FileSyncs {
		return nil, fmt.Errorf("the capture proxy's sync counters went back (restarted during the run?)")
	}
	d := a.Since(b)
	c := &bench.CaptureSyncs{
		Appends: d.Appends, FileSystemSyncs: d.FileSystemSyncs, FileSyncs: d.FileSyncs,
		AppendsPerSync: d.AppendsPerSync(), BusyS: d.Busy.Seconds(), WindowS: after.at.Sub(before.at).Seconds(),
	}
	if c.WindowS > 0 {
		c.BusyShare = c.BusyS / c.WindowS
	}
	return c, nil
}

// syncsOver reads the counters again after the load and returns what they
// did since before, or nil (logged) when they cannot be read.
func syncsOver(ctx context.Context, client *http.Client, root string, before syncReading, log *slog.Logger) *bench.CaptureSyncs {
	after, ok := readSyncs(context.WithoutCancel(ctx), client, root)
	if !ok {
		logger(log).Warn("capture proxy's sync counters not readable after the load; result has no capture_syncs", "proxy", root)
		return nil
	}
	c, err := captureSyncs(before, after)
	if err != nil {
		logger(log).Warn(err.Error(), "proxy", root)
		return nil
	}
	return c
}

func logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.Default()
	}
	return l
}
