package consumer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"

	"github.com/capbench/capbench/internal/fixtures"
)

// fixturesDir is the shared fixtures folder next to the repository, or "".
func fixturesDir() string {
	dir, _ := fixtures.Dir()
	return dir
}

// copyDir copies the regular files of src into a fresh dst.
func copyDir(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	entries, err := os.ReadDir(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a capture that never wrote a file
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// decodeUseNumber decodes JSON keeping numbers exact.
func decodeUseNumber(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	return dec.Decode(v)
}

// generic marshals v and decodes it into plain JSON values (float64 numbers)
// so values compare numerically (1 == 1.0).
func generic(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		panic(err)
	}
	return out
}

// diff returns the first difference between two generic JSON values.
func diff(path string, got, want any) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: got %T, want object", path, got)
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			gv, gok := g[k]
			wv, wok := w[k]
			if gok != wok {
				return fmt.Sprintf("%s.%s: present got=%v want=%v (got %v, want %v)", path, k, gok, wok, short(gv), short(wv))
			}
			if d := diff(path+"."+k, gv, wv); d != "" {
				return d
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok {
			return fmt.Sprintf("%s: got %T, want array", path, got)
		}
		if len(g) != len(w) {
			return fmt.Sprintf("%s: length got %d want %d", path, len(g), len(w))
		}
		for i := range w {
			if d := diff(fmt.Sprintf("%s[%d]", path, i), g[i], w[i]); d != "" {
				return d
			}
		}
		return ""
	default:
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Sprintf("%s: got %v, want %v", path, short(got), short(want))
		}
		return ""
	}
}

func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// transportSource is a store.Source over a fixed list of entries, like the
// fixtures' "source" entry point.
type transportSource struct {
	rolloutID string
	entries   []*record.Entry
	dropped   bool
}

func (s *transportSource) Freeze(ctx context.Context, id string) (*store.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return &store.Snapshot{RolloutID: id, Entries: s.entries, SnapshotID: "transport-snapshot", Version: 7}, nil
}

func (s *transportSource) Drop(ctx context.Context, id, snapshotID string, version int) (bool, error) {
	s.dropped = true
	return snapshotID == "transport-snapshot" && version == 7, nil
}

func (s *transportSource) Close() error { return nil }

// failingSource fails every freeze with err.
type failingSource struct{ err error }

func (s failingSource) Freeze(context.Context, string) (*store.Snapshot, error) { return nil, s.err }
func (s failingSource) Drop(context.Context, string, string, int) (bool, error) {
	return false, errors.New("drop must not be called")
}
func (s failingSource) Close() error { return nil }

func readEntries(path string) ([]*record.Entry, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*record.Entry
	for _, line := range strings.Split(string(b), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		e, err := record.ParseLine([]byte(line))
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
