package store

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// A rollout's lock is a flock(2) on its lock file. flock, not fcntl record
// locks, is what Python's fcntl.flock takes, so Go and Gym processes exclude
// each other; flock locks belong to the open file description, so two
// descriptors in one process also exclude each other.

// lockPollInterval bounds how long a waiter sleeps between non-blocking
// attempts; polling is what lets a waiter honour context cancellation.
const lockPollInterval = 2 * time.Millisecond

// acquireFileLock takes a whole-file flock, exclusive or shared, on the lock
// file at path: through cached (a descriptor the caller kept from an earlier
// call) when it still names the file at path, else through a fresh
// descriptor, opened for append and created if missing as Python's "a+b"
// does. It returns the descriptor it locked.
//
// sweep_retired removes lock files while holding them, so after locking we
// check that the path still names the inode we locked; if not, a waiter that
// queued on the removed inode would hold a lock nobody else sees, so it
// retries on the new file.
func (s *FileStore) acquireFileLock(ctx context.Context, path string, exclusive bool, cached *appender) (*appender, error) {
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	for {
		a := cached
		cached = nil
		if a == nil {
			f, err := s.creator.open(path, os.O_RDWR|os.O_APPEND, true, false)
			if isSpaceErr(err) {
				return nil, &WriteError{Path: path, Op: "create", Err: err}
			}
			if err != nil {
				return nil, fmt.Errorf("store: open lock %s: %w", path, err)
			}
			fi, err := f.Stat()
			if err != nil {
				_ = f.Close()
				return nil, fmt.Errorf("store: stat lock %s: %w", path, err)
			}
			a = &appender{f: f, id: idOf(fi)}
		}
		if err := flockWait(ctx, a.f, how); err != nil {
			_ = a.f.Close()
			return nil, err
		}
		same, err := namesFile(path, a.id)
		if err != nil {
			_ = unix.Flock(int(a.f.Fd()), unix.LOCK_UN)
			_ = a.f.Close()
			return nil, err
		}
		if same {
			return a, nil
		}
		_ = unix.Flock(int(a.f.Fd()), unix.LOCK_UN)
		_ = a.f.Close()
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

// namesFile reports whether path (not following a link) is the file id.
func namesFile(path string, id fileID) (bool, error) {
	pi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: stat lock: %w", err)
	}
	return idOf(pi) == id, nil
}

// release unlocks; the descriptor is closed unless keep (the slot caches it).
func release(a *appender, keep bool) {
	_ = unix.Flock(int(a.f.Fd()), unix.LOCK_UN)
	if !keep {
		_ = a.f.Close()
	}
}
