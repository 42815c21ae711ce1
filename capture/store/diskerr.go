package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrDiskFull matches (errors.Is) a WriteError caused by a full capture disk
// or an exhausted quota.
var ErrDiskFull = errors.New("capture disk full")

// WriteError is a write to the capture directory that failed: the disk is
// full, the quota is spent, or the device failed. Nothing half-written stays
// behind. Callers serving clients map it (errors.As) to a retryable error:
// the capture proxy answers 503 with Retry-After, naming the disk.
type WriteError struct {
	// Path is the file (or, for a temp file, the directory) written.
	Path string
	// Op says what was being done ("append to", "fsync", "create", ...).
	Op  string
	Err error
}

func (e *WriteError) Error() string {
	return fmt.Sprintf("store: %s %s: %v", e.Op, e.Path, e.Err)
}

func (e *WriteError) Unwrap() error { return e.Err }

// Is makes a disk-full WriteError match ErrDiskFull.
func (e *WriteError) Is(target error) bool { return target == ErrDiskFull && isSpaceErr(e.Err) }

// Dir is the capture directory the failed write was in.
func (e *WriteError) Dir() string { return filepath.Dir(e.Path) }

func isSpaceErr(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// failed counts a write failure (for DiskStats) and returns err.
func (s *FileStore) failed(err *WriteError) error {
	s.writeFailures.Add(1)
	if isSpaceErr(err.Err) {
		s.diskFull.Add(1)
	}
	return err
}

// DiskStats is the capture directory's file system as the store sees it.
type DiskStats struct {
	// FreeBytes and TotalBytes are what statfs(2) reports for the file
	// system holding the directory (free to unprivileged users).
	FreeBytes, TotalBytes uint64
	// WriteFailures counts writes that failed since the store was opened;
	// DiskFullFailures those of them caused by a full disk or quota.
	WriteFailures, DiskFullFailures uint64
	// Syncs counts the syncs that made appends durable.
	Syncs SyncStats
}

// DiskStats reads the free space of the capture directory's file system, the
// store's write-failure counters and its sync counters (exported by the
// proxy's /metrics). The counters are set even when statfs fails.
func (s *FileStore) DiskStats() (DiskStats, error) {
	out := DiskStats{WriteFailures: s.writeFailures.Load(), DiskFullFailures: s.diskFull.Load(), Syncs: s.syncs.stats()}
	var st unix.Statfs_t
	if err := unix.Statfs(s.dir, &st); err != nil {
		return out, fmt.Errorf("store: statfs %s: %w", s.dir, err)
	}
	out.FreeBytes = st.Bavail * uint64(st.Bsize)
	out.TotalBytes = st.Blocks * uint64(st.Bsize)
	return out, nil
}
