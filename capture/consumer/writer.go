package consumer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync"
)

// ErrWriterClosed is returned by Append after Close.
var ErrWriterClosed = errors.New("rollouts writer is closed")

// Writer appends finished rollout records to a JSONL file durably: every
// Append writes one whole line and fsyncs the file before it returns, so a
// caller may retire the record's snapshot afterwards. A failed append is cut
// back off the file, so nothing half-written stays behind.
type Writer struct {
	mu   sync.Mutex
	f    *os.File
	size int64
	// broken is set when a failed append could not be cut back: the file may
	// end in a partial line, so nothing more may be appended after it.
	broken error
}

// CreateWriter creates (or truncates) path and fsyncs its directory so the
// file itself survives a crash.
func CreateWriter(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, fmt.Errorf("rollouts writer: create: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("rollouts writer: fsync %s: %w", path, err)
	}
	if err := syncDir(filepath.Dir(path)); err != nil {
		_ = f.Close()
		return nil, err
	}
	return &Writer{f: f}, nil
}

// OpenWriter opens path for appending, creating it when missing, and returns
// the records it already holds, so a run interrupted after some appends can
// continue without writing any record twice. Nothing already in the file is
// rewritten. The one exception is an unterminated last line that is not
// JSON: an append that never returned (so its rollout was never retired),
// which is cut off so the file stays valid JSONL. Any other line that is not
// a JSON object is an error and the file is left as it is.
func OpenWriter(path string) (*Writer, []Rollout, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		w, err := CreateWriter(path)
		return w, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("rollouts writer: read %s: %w", path, err)
	}
	keep := len(data)
	if i := bytes.LastIndexByte(data, '\n'); i+1 < len(data) && !json.Valid(bytes.TrimSpace(data[i+1:])) {
		keep = i + 1
	}
	done, err := ReadRollouts(bytes.NewReader(data[:keep]))
	if err != nil {
		return nil, nil, fmt.Errorf("rollouts writer: existing %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("rollouts writer: open: %w", err)
	}
	w := &Writer{f: f, size: int64(keep)}
	if keep < len(data) {
		if err := f.Truncate(int64(keep)); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("rollouts writer: cut the torn last line of %s: %w", path, err)
		}
	} else if keep > 0 && data[keep-1] != '\n' {
		// A whole last record without its newline: end the line before
		// appending after it.
		if _, err := f.WriteAt([]byte{'\n'}, int64(keep)); err != nil {
			_ = f.Close()
			return nil, nil, fmt.Errorf("rollouts writer: end the last line of %s: %w", path, err)
		}
		w.size++
	}
	if _, err := f.Seek(w.size, 0); err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("rollouts writer: seek: %w", err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("rollouts writer: fsync %s: %w", path, err)
	}
	return w, done, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("rollouts writer: open dir: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("rollouts writer: fsync dir %s: %w", dir, err)
	}
	return nil
}

// EncodeRollout renders one record as a JSONL line (without the newline):
// compact, no HTML escaping, keys in Go's sorted order, and floats as
// Python's json.dumps writes them (1.0, -3.2e-05), so a record written here
// reads like one Gym wrote.
func EncodeRollout(rec Rollout) ([]byte, error) {
	e := newJSONEncoder(nil)
	e.pythonFloats = true
	if err := e.object(rec); err != nil {
		return nil, fmt.Errorf("rollouts writer: encode: %w", err)
	}
	return e.buf, nil
}

// Append writes rec as one line and fsyncs the file.
func (w *Writer) Append(rec Rollout) error {
	line, err := EncodeRollout(rec)
	if err != nil {
		return err
	}
	line = append(line, '\n')
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return ErrWriterClosed
	}
	if w.broken != nil {
		return fmt.Errorf("rollouts writer: unusable since an append could not be cut back: %w", w.broken)
	}
	n, err := w.f.Write(line)
	if err == nil && n != len(line) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(line))
	}
	if err == nil {
		err = w.f.Sync()
	}
	if err != nil {
		// Cut the partial line so the file stays a valid JSONL.
		terr := w.f.Truncate(w.size)
		if terr == nil {
			_, terr = w.f.Seek(w.size, 0)
		}
		if terr != nil {
			w.broken = errors.Join(err, terr)
		}
		return fmt.Errorf("rollouts writer: append: %w", err)
	}
	w.size += int64(n)
	return nil
}

// Close fsyncs and closes the file; closing twice is a no-op.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return nil
	}
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("rollouts writer: close: %w", err)
	}
	return nil
}

func appendPyFloat(dst []byte, f float64) ([]byte, error) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("rollouts writer: unsupported float %v", f)
	}
	return append(dst, PyFloat(f)...), nil
}
