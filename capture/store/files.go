package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// fileMode is the mode of every file the store creates: captured prompts
// and generations are nobody else's business.
const fileMode = 0o600

// dirMode is the mode of a capture directory the store creates.
const dirMode = 0o700

// openRegular opens path without following a symbolic link and refuses
// anything that is not a regular file, with an error naming the path. A
// capture directory may be shared (a tmpfs is world-writable), and a planted
// link would otherwise make the store truncate or append to its target.
// O_NONBLOCK keeps a planted FIFO from blocking the open; it does nothing to
// a regular file.
func openRegular(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, fileMode)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("store: %s is not a regular file (a symbolic link); remove it", path)
		}
		if errors.Is(err, syscall.ENXIO) {
			return nil, fmt.Errorf("store: %s is not a regular file (a FIFO or socket); remove it", path)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("store: stat %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("store: %s is not a regular file (%s); remove it", path, fileType(fi.Mode()))
	}
	return f, nil
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	}
	return "mode " + m.String()
}

// readRegular reads a whole file through openRegular, as os.ReadFile does.
func readRegular(path string) ([]byte, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllFrom(f, nil)
}

// fileID is a file's identity: an open descriptor still names the file at a
// path exactly when the path's (device, inode) is the descriptor's.
type fileID struct{ dev, ino uint64 }

func idOf(fi os.FileInfo) fileID {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return fileID{uint64(st.Dev), st.Ino}
	}
	return fileID{}
}

// appender is an append-only descriptor a slot keeps open between calls,
// with the identity it had when opened. Reusing it saves an open (which, with
// O_CREAT, takes the directory's lock that every rollout's files share) and
// a close per call.
type appender struct {
	f  *os.File
	id fileID
}

// openFiles are the descriptors a slot keeps between operations: they are
// only used by exclusive holders of the slot, and closed when the slot is
// evicted.
type openFiles struct {
	lock, jsonl, intents *appender
}

func (o *openFiles) close() {
	for _, a := range []**appender{&o.lock, &o.jsonl, &o.intents} {
		if *a != nil {
			_ = (*a).f.Close()
			*a = nil
		}
	}
}

// appendTo appends data to the file at path (writeTo), then makes it
// durable. It returns the file's key after the append.
func (s *FileStore) appendTo(a **appender, path string, cur statKey, data []byte) (statKey, error) {
	if err := s.writeTo(a, path, cur, data); err != nil {
		return statKey{}, err
	}
	f := (*a).f
	// fdatasync, not fsync: it makes the appended bytes and the new size
	// durable (all a reader needs) without also waiting for timestamps,
	// which on ext4 more than doubles the appends one writer gets per
	// second (docs/store.md).
	if err := s.durable(f); err != nil {
		// The line may or may not be on disk; the descriptor is not reused.
		_ = f.Close()
		*a = nil
		return statKey{}, s.failed(&WriteError{Path: path, Op: "fsync", Err: err})
	}
	after, err := f.Stat()
	if err != nil {
		return statKey{}, fmt.Errorf("store: stat %s: %w", path, err)
	}
	return keyOf(after), nil
}

// writeTo appends data to the file at path through the cached descriptor
// *a when the path still names it (cur is the path's lstat, taken under the
// rollout's lock), else through a fresh one that replaces it. A failed
// write is cut back to the size before it, so nothing half-written stays
// behind. Nothing is synced: the line is in the kernel, where a killed
// process leaves it.
func (s *FileStore) writeTo(a **appender, path string, cur statKey, data []byte) error {
	if *a != nil && (!cur.exists || (*a).id != (fileID{cur.dev, cur.ino})) {
		_ = (*a).f.Close()
		*a = nil
	}
	before := cur.size
	if *a == nil {
		f, err := s.creator.open(path, os.O_WRONLY|os.O_APPEND, cur.exists, true)
		if err != nil {
			if isSpaceErr(err) {
				return s.failed(&WriteError{Path: path, Op: "create", Err: err})
			}
			return fmt.Errorf("store: open %s: %w", path, err)
		}
		fi, err := f.Stat()
		if err != nil {
			_ = f.Close()
			return fmt.Errorf("store: stat %s: %w", path, err)
		}
		*a = &appender{f: f, id: idOf(fi)}
		before = fi.Size()
	}
	if _, err := (*a).f.Write(data); err != nil {
		_ = (*a).f.Truncate(before)
		return s.failed(&WriteError{Path: path, Op: "append to", Err: err})
	}
	return nil
}

// durable makes what was appended to f durable: through the store's group
// sync, or with f's own fdatasync under WithPerFileSync; and with it the
// directory entries of the files linked before it (entriesDurable).
func (s *FileStore) durable(f *os.File) error {
	linked := s.creator.linked.Load()
	whole := false
	var err error
	if s.group != nil {
		whole, err = s.group.wait(f)
	} else {
		err = s.syncs.run(false, datasync, f)
	}
	if err != nil {
		return err
	}
	s.syncs.appends.Add(1)
	return s.entriesDurable(linked, whole)
}

func datasync(f *os.File) error {
	for {
		err := unix.Fdatasync(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// staleTempAge is how old a state temp file must be before opening a store
// removes it: a writer renames its temp file within milliseconds, so one
// this old was left by a killed process, not by a live writer of another
// process sharing the directory.
const staleTempAge = time.Minute

// removeStaleTemps removes the state and probe temp files that killed
// writers left behind.
func (s *FileStore) removeStaleTemps() {
	names, err := s.listNames()
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-staleTempAge)
	for _, name := range names {
		if !strings.HasPrefix(name, ".tokens-state-") && !strings.HasPrefix(name, ".tokens-probe-") {
			continue
		}
		p := s.dir + string(os.PathSeparator) + name
		fi, err := os.Lstat(p)
		if err != nil || !fi.Mode().IsRegular() || fi.ModTime().After(cutoff) {
			continue
		}
		if err := os.Remove(p); err == nil {
			s.log.Info("removed a state temp file a killed writer left", "path", p)
		}
	}
}

// warnIfShared warns when other users may write into the capture directory:
// they could plant files there (the store refuses links and non-regular
// files, but not every reader of the directory does).
func (s *FileStore) warnIfShared(fi os.FileInfo) {
	if fi.Mode().Perm()&0o022 != 0 {
		s.log.Warn("the capture directory is writable by other users; use a private directory (mode 0700)",
			"dir", s.dir, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
}
