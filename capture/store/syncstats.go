package store

import (
	"os"
	"sync/atomic"
	"time"
)

// SyncStats counts, since the store was opened, the syncs that made appended
// lines (records and intents) durable: what every acknowledged call waited
// for. Appends over FileSystemSyncs+FileSyncs is how many appends a sync
// covered; Busy per second of wall time is how much of the time a sync was
// running, which at 1 means the disk's sync rate, not the CPU, bounds the
// calls a second (docs/store.md#group-commit).
type SyncStats struct {
	// Appends is the appends made durable, each by one sync.
	Appends uint64
	// FileSystemSyncs is the syncfs(2) calls of group syncs, each covering
	// every append that joined it; FileSyncs the fdatasync(2) calls of one
	// file (a writer syncing alone, or WithPerFileSync).
	FileSystemSyncs, FileSyncs uint64
	// Busy is the wall time spent in those syncs, summed: two syncs running
	// at once count twice.
	Busy time.Duration
}

// Since is what the counters did from before to s.
func (s SyncStats) Since(before SyncStats) SyncStats {
	return SyncStats{
		Appends:         s.Appends - before.Appends,
		FileSystemSyncs: s.FileSystemSyncs - before.FileSystemSyncs,
		FileSyncs:       s.FileSyncs - before.FileSyncs,
		Busy:            s.Busy - before.Busy,
	}
}

// AppendsPerSync is how many appends a sync covered; 0 without syncs.
func (s SyncStats) AppendsPerSync() float64 {
	syncs := s.FileSystemSyncs + s.FileSyncs
	if syncs == 0 {
		return 0
	}
	return float64(s.Appends) / float64(syncs)
}

// syncCounters accrue a store's SyncStats; a nil one counts nothing.
type syncCounters struct {
	appends, fileSystem, file, busyNanos atomic.Uint64
}

// run runs sync on f, counting it as a sync of the whole file system or of
// f alone, with its time.
func (c *syncCounters) run(whole bool, sync func(*os.File) error, f *os.File) error {
	if c == nil {
		return sync(f)
	}
	start := time.Now()
	err := sync(f)
	c.busyNanos.Add(uint64(time.Since(start)))
	if whole {
		c.fileSystem.Add(1)
	} else {
		c.file.Add(1)
	}
	return err
}

func (c *syncCounters) stats() SyncStats {
	return SyncStats{
		Appends:         c.appends.Load(),
		FileSystemSyncs: c.fileSystem.Load(),
		FileSyncs:       c.file.Load(),
		Busy:            time.Duration(c.busyNanos.Load()),
	}
}
