package store

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// creator makes the files a rollout is missing
// (docs/store.md#creating-files-while-others-are-created). Creating a file
// by name allocates its inode while holding the directory's lock, which
// every rollout's files share; on ext4 without a journal, after many
// deletes, one allocation can take most of a millisecond, and concurrent
// creators queue (and spin) behind it. So while another creation is
// running, a file is made as an unnamed inode in the directory (O_TMPFILE),
// allocated outside that lock, then given its name with linkat(2), which
// never replaces an existing name. A creation with nothing else in flight
// goes by name, as Gym's store does.
//
// A linked file's directory entry is not made durable by the file's own
// fdatasync on every file system (ext4 without a journal syncs the parent
// only for a file created by name), so durable syncs the directory once
// after linking when no sync of the whole file system covered it.
type creator struct {
	byName   bool        // WithCreateByName: never link (the benchmarks' peer)
	noLink   atomic.Bool // O_TMPFILE or the /proc link failed here once: stop trying
	inFlight atomic.Int32
	// linked counts the files linked so far whose entries must become
	// durable; synced is the count the directory has been synced up to.
	linked, synced atomic.Uint64
	syncDir        func() error // the store's directory fsync (specs count it)
}

// open opens path with flag (O_WRONLY or O_RDWR, and O_APPEND), creating
// the file when it is missing. mayExist makes it try a plain open first: an
// open that may create takes the directory's lock, which every rollout's
// opens contend for. durable is as for create.
func (c *creator) open(path string, flag int, mayExist, durable bool) (*os.File, error) {
	if mayExist {
		f, err := openRegular(path, flag)
		if !errors.Is(err, os.ErrNotExist) {
			return f, err
		}
	}
	return c.create(path, flag, durable)
}

// create opens path with flag (O_WRONLY or O_RDWR, and O_APPEND), creating
// the file when it is missing, as openRegular with O_CREATE does. durable
// says whether the file's existence must survive a crash once the store
// syncs it (not so for a lock file, which holds nothing).
func (c *creator) create(path string, flag int, durable bool) (*os.File, error) {
	alone := c.inFlight.Add(1) == 1
	defer c.inFlight.Add(-1)
	if !alone && !c.byName && !c.noLink.Load() {
		if f, ok := c.link(path, flag); ok {
			if durable {
				c.linked.Add(1)
			}
			return f, nil
		}
	}
	return openRegular(path, flag|os.O_CREATE)
}

// link makes a new file at path from an unnamed inode; ok is false when it
// did not (the caller opens by name, which also reports any error the
// directory gives, and opens the file someone else created meanwhile).
func (c *creator) link(path string, flag int) (*os.File, bool) {
	fd, err := unix.Open(filepath.Dir(path), flag|unix.O_TMPFILE|unix.O_CLOEXEC, fileMode)
	if err != nil {
		if unsupported(err) {
			c.noLink.Store(true)
		}
		return nil, false
	}
	// linkat with AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the descriptor's
	// /proc link needs nothing.
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if err != nil {
		_ = unix.Close(fd) // the unnamed inode goes with it
		if !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EINTR) && !isSpaceErr(err) {
			c.noLink.Store(true) // no /proc, or a file system without hard links
		}
		return nil, false
	}
	return os.NewFile(uintptr(fd), path), true
}

// unsupported is whether an O_TMPFILE open failed because the kernel or
// the file system does not make unnamed files (a kernel without O_TMPFILE
// reads it as O_DIRECTORY and answers EISDIR), not for want of space or
// permission.
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EISDIR) || errors.Is(err, unix.EINVAL)
}

// entriesDurable makes durable the directory entries of the files linked
// before a sync that has just finished (linked is creator.linked read before
// it started): a sync of the whole file system covered them, a file's own
// fdatasync may not have.
func (s *FileStore) entriesDurable(linked uint64, whole bool) error {
	c := &s.creator
	if linked <= c.synced.Load() {
		return nil
	}
	if !whole {
		if err := c.syncDir(); err != nil {
			return err
		}
	}
	for {
		cur := c.synced.Load()
		if cur >= linked || c.synced.CompareAndSwap(cur, linked) {
			return nil
		}
	}
}
