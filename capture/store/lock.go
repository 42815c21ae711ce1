package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fileLock is a held flock(2) on a rollout's lock file. flock, not fcntl
// record locks, is what Python's fcntl.flock takes, so Go and Gym processes
// exclude each other; flock locks belong to the open file description, so two
// descriptors in one process also exclude each other.
type fileLock struct {
	f *os.File
}

// lockPollInterval bounds how long a waiter sleeps between non-blocking
// attempts; polling is what lets a waiter honour context cancellation.
const lockPollInterval = 2 * time.Millisecond

// acquireFileLock opens path for append (creating it, as Python's "a+b"
// does) and takes a whole-file flock, exclusive or shared.
//
// sweep_retired removes lock files while holding them, so after locking we
// check that the path still names the inode we locked; if not, a waiter that
// queued on the removed inode would hold a lock nobody else sees, so it
// retries on the new file.
func acquireFileLock(ctx context.Context, path string, exclusive bool) (*fileLock, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("store: open lock %s: %w", path, err)
		}
		if err := flockWait(ctx, f, how); err != nil {
			_ = f.Close()
			return nil, err
		}
		same, err := sameInode(f, path)
		if err != nil {
			_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
			_ = f.Close()
			return nil, err
		}
		if same {
			return &fileLock{f: f}, nil
		}
		_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
		_ = f.Close()
	}
}

func flockWait(ctx context.Context, f *os.File, how int) error {
	fd := int(f.Fd())
	for {
		err := unix.Flock(fd, how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("store: flock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: waiting for lock %s: %w", f.Name(), ctx.Err())
		case <-time.After(lockPollInterval):
		}
	}
}

func sameInode(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, fmt.Errorf("store: stat lock: %w", err)
	}
	pi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: stat lock: %w", err)
	}
	a, okA := fi.Sys().(*syscall.Stat_t)
	b, okB := pi.Sys().(*syscall.Stat_t)
	if !okA || !okB {
		return true, nil
	}
	return a.Dev == b.Dev && a.Ino == b.Ino, nil
}

func (l *fileLock) release() {
	_ = unix.Flock(int(l.f.Fd()), unix.LOCK_UN)
	_ = l.f.Close()
}
