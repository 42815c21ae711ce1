package store_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/store"
)

// FuzzParseState: any input either fails cleanly or round-trips to a fixed
// point (encoding what was parsed, then parsing again, changes nothing).
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"entry_digests":{"c1":"ab"},"frozen":false,"incomplete":false,"indexed_size":594,"retired":false,"snapshot_id":"","version":1}`))
	f.Add([]byte(`{"frozen":true,"version":3,"refusals":[{"code":"x","created_at":1.5}]}`))
	f.Add([]byte(`{"entry_digests":[],"indexed_size":"7"}`))
	f.Add([]byte(`[1]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := store.ParseState(data)
		if err != nil {
			return
		}
		once, err := st.MarshalCanonical()
		if err != nil {
			return // e.g. an unknown key holding a number beyond 64 bits
		}
		again, err := store.ParseState(once)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", once, err)
		}
		twice, err := again.MarshalCanonical()
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("not a fixed point:\n%s\n%s (%v)", once, twice, err)
		}
	})
}

// FuzzValidateRolloutID: an accepted id always names a file directly inside
// the store directory.
func FuzzValidateRolloutID(f *testing.F) {
	for _, s := range []string{"r-1", "..", ".x", "a/b", "", "a\x00b", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if store.ValidateRolloutID(id) != nil {
			return
		}
		dir := filepath.Join("base", "store")
		p := filepath.Join(dir, id+".tokens.jsonl")
		if filepath.Dir(p) != dir || strings.ContainsAny(id, "/\\\x00") {
			t.Fatalf("id %q escapes: %s", id, p)
		}
	})
}

// repairSuffixes are the file names a fuzzed directory may hold for rollout
// "r" (and one foreign name).
var repairSuffixes = []string{".tokens.jsonl", ".tokens.state.json", ".tokens.intents", ".tokens.incomplete", ".tokens.lock", ".tokens-state-x"}

// FuzzRepair: arbitrary directory contents in (files of any bytes, links to
// a file outside the directory, dangling links, FIFOs, directories where a
// file belongs), every store operation run over them: no panic, and nothing
// outside the directory is touched or created.
func FuzzRepair(f *testing.F) {
	good, err := newEntry("r", "c1").MarshalCanonical()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append([]byte{0}, append(good, '\n')...))
	f.Add(append(append([]byte{0}, good...), []byte("\n{\"rollout_id\":\"r\",\"mod")...))
	f.Add([]byte("\x01{\"entry_digests\":{},\"indexed_size\":5,\"version\":1}\xff\x00x\n"))
	f.Add([]byte("\x02c1\n-c2\n\xff\x80"))
	f.Add([]byte("\x40\xff\x41\xff\x83\xff\xc0"))
	f.Fuzz(fuzzRepairBody)
}

func fuzzRepairBody(t *testing.T, data []byte) {
	{
		root := t.TempDir()
		dir := filepath.Join(root, "capture")
		victim := filepath.Join(root, "victim")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(victim, []byte("keep\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Parts are separated by 0xff; a part's first byte picks the file
		// (low bits) and what it is (high bits): 0 a file of the rest,
		// 0x40 a link to the victim, 0x80 a dangling link out of the
		// directory, 0xc0 a directory (or, with bit 0, a FIFO).
		for _, part := range bytes.Split(data, []byte{0xff}) {
			if len(part) == 0 {
				continue
			}
			name := filepath.Join(dir, "r"+repairSuffixes[int(part[0]&0x3f)%len(repairSuffixes)])
			switch part[0] & 0xc0 {
			case 0:
				// O_EXCL: never write through what an earlier part made.
				if fh, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
					_, _ = fh.Write(part[1:])
					_ = fh.Close()
				}
			case 0x40:
				_ = os.Symlink(victim, name)
			case 0x80:
				_ = os.Symlink(filepath.Join(root, "created-through-link"), name)
			default:
				if part[0]&1 == 1 {
					_ = syscall.Mkfifo(name, 0o600)
				} else {
					_ = os.Mkdir(name, 0o700)
				}
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s, err := store.NewFileStore(dir)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = s.ReadEntries(ctx, "r")
		_, _ = s.State(ctx, "r")
		_ = s.BeginCall(ctx, "r", "c9")
		_ = s.Put(ctx, newEntry("r", "c9"))
		_ = s.MarkIncomplete(ctx, "r", "c8")
		_, _, _ = store.NewFollower(s, "r").Refresh(ctx)
		if snap, err := s.Freeze(ctx, "r"); err == nil {
			_, _ = s.Drop(ctx, "r", snap.SnapshotID, snap.Version)
		}
		_, _ = s.SweepRetired(ctx, 0)
		_, _ = s.Rollouts(ctx)
		_ = s.Close()
		b, err := os.ReadFile(victim)
		if err != nil || string(b) != "keep\n" {
			t.Fatalf("the file outside the directory changed: %q %v", b, err)
		}
		names, err := os.ReadDir(root)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range names {
			if n.Name() != "capture" && n.Name() != "victim" {
				t.Fatalf("created outside the directory: %s", n.Name())
			}
		}
	}
}
