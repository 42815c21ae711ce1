package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/internal/gympeer"
)

// BenchmarkPutVsGym writes the same records with our file store and, when
// CAPBENCH_GYM_DIR names a NeMo Gym checkout (docs/gym-peer.md), with Gym's
// TokenCaptureStore, in alternating order, each round into fresh
// directories; one op is one round of ours. Cases: 64 rollouts at once, 16
// small records each (one writer per rollout, as BenchmarkPut); the same
// with a begin_call before every put, as a capture proxy makes each call (as
// BenchmarkCall); and one rollout of 200 records growing to 32k prompt
// tokens (as BenchmarkRollout200x32k). Gym runs two ways: "async", its own capture path's
// way (one coroutine per rollout awaiting TokenCaptureStore.put, which runs
// append on Python's default thread pool), reported as gym-puts/s and x-gym;
// and "threads", one thread per rollout calling append directly
// (gym-threads-puts/s, x-gym-threads). Each x is the median of per-round
// time ratios, Gym's over ours. After the rounds the JSONL files both sides
// wrote must be byte-identical, Gym's freeze must read ours and ours must
// read Gym's, or the benchmark fails.
func BenchmarkPutVsGym(b *testing.B) {
	small := func() []*record.Entry {
		var es []*record.Entry
		for r := range 64 {
			for i := range 16 {
				es = append(es, benchEntry(fmt.Sprintf("roll-%d", r), r*16+i))
			}
		}
		return es
	}
	cases := []struct {
		name    string
		entries func() []*record.Entry
		intent  bool
	}{
		{"rollouts=64", small, false},
		{"rollouts=64/begin_call+put", small, true},
		{"rollout=200x32k", func() []*record.Entry { return longRolloutEntries("long", 200) }, false},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			entries := c.entries()
			groups, ids := byRollout(entries)
			gym, file := startGymStore(b, entries)
			ctx := context.Background()
			root := b.TempDir()
			var async, threads gympeer.Paired
			var oursDir, gymDir string
			i := 0
			for b.Loop() {
				b.StopTimer()
				round := i
				i++
				for _, d := range []string{oursDir, gymDir} {
					if d != "" {
						_ = os.RemoveAll(d)
					}
				}
				oursDir = filepath.Join(root, "ours-"+strconv.Itoa(round))
				gymDir = filepath.Join(root, "gym-"+strconv.Itoa(round))
				var asyncTime, threadsTime time.Duration
				gymRound := func() {
					if gym == nil {
						return
					}
					asyncTime = gym.put(b, gympeer.Request{Dir: gymDir, EntriesFile: file, Mode: gympeer.PutAsync, Intent: c.intent}, len(entries))
					threadsDir := filepath.Join(root, "gym-threads-"+strconv.Itoa(round))
					threadsTime = gym.put(b, gympeer.Request{Dir: threadsDir, EntriesFile: file, Mode: gympeer.PutThreads, Intent: c.intent}, len(entries))
					_ = os.RemoveAll(threadsDir)
				}
				if !gympeer.OursFirst(round) {
					gymRound()
				}
				s, err := store.NewFileStore(oursDir)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				ours := putConcurrently(ctx, b, s, groups, c.intent)
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				if gympeer.OursFirst(round) {
					gymRound()
				}
				// Without Gym its times stay 0 and only ours is reported.
				async.Add(ours, asyncTime)
				threads.Add(ours, threadsTime)
				b.StartTimer()
			}
			b.StopTimer()
			n, unit := float64(len(entries)), "puts/s"
			if c.intent {
				unit = "calls/s"
			}
			b.ReportMetric(n/(async.Ours()/1e3), unit)
			if gym != nil {
				b.ReportMetric(n/(async.Gym()/1e3), "gym-"+unit)
				b.ReportMetric(async.Ratio(), "x-gym")
				b.ReportMetric(n/(threads.Gym()/1e3), "gym-threads-"+unit)
				b.ReportMetric(threads.Ratio(), "x-gym-threads")
				crossRead(b, gym, entries, ids, oursDir, gymDir, c.intent)
			}
		})
	}
}

// putConcurrently puts every group from its own goroutine, in order, each
// put after a BeginCall when intent is set, and returns the wall time.
func putConcurrently(ctx context.Context, b *testing.B, s *store.FileStore, groups [][]*record.Entry, intent bool) time.Duration {
	start := time.Now()
	var wg sync.WaitGroup
	for _, g := range groups {
		wg.Go(func() {
			for _, e := range g {
				if intent {
					if err := s.BeginCall(ctx, e.RolloutID, e.ModelCallID); err != nil {
						b.Error(err)
						return
					}
				}
				if err := s.Put(ctx, e); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return time.Since(start)
}

// byRollout groups entries by rollout, keeping their order.
func byRollout(entries []*record.Entry) ([][]*record.Entry, []string) {
	at := map[string]int{}
	var groups [][]*record.Entry
	var ids []string
	for _, e := range entries {
		k, ok := at[e.RolloutID]
		if !ok {
			k = len(groups)
			at[e.RolloutID] = k
			groups = append(groups, nil)
			ids = append(ids, e.RolloutID)
		}
		groups[k] = append(groups[k], e)
	}
	return groups, ids
}

// gymStore is NeMo Gym's store driven from a warm Python session.
type gymStore struct{ s *gympeer.Session }

// startGymStore starts the Gym peer with the entries written as canonical
// lines to a file it loads (untimed) each round; nil when it is not
// configured, after saying so.
func startGymStore(b *testing.B, entries []*record.Entry) (*gymStore, string) {
	_, s := gympeer.ForBenchmark(b, record.SchemaVersion)
	if s == nil {
		return nil, ""
	}
	var lines bytes.Buffer
	for _, e := range entries {
		line, err := e.MarshalCanonical()
		if err != nil {
			b.Fatal(err)
		}
		lines.Write(append(line, '\n'))
	}
	file := filepath.Join(b.TempDir(), "entries.jsonl")
	if err := os.WriteFile(file, lines.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	return &gymStore{s: s}, file
}

// put is Gym's time inside Python to write every entry of req.EntriesFile
// into req.Dir.
func (g *gymStore) put(b *testing.B, req gympeer.Request, want int) time.Duration {
	req.Op = gympeer.OpPut
	rep, err := g.s.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if rep.Puts != want {
		b.Fatalf("Gym's store (%s) put %d records, want %d", req.Mode, rep.Puts, want)
	}
	return time.Duration(rep.Secs() * float64(time.Second))
}

// crossRead checks the two stores' files are interchangeable: each
// rollout's JSONL (and intents file, with intent) is the same bytes on both
// sides, Gym's freeze of our directory reads every record as we wrote it,
// complete, and our freeze of Gym's directory does too.
func crossRead(b *testing.B, gym *gymStore, entries []*record.Entry, ids []string, oursDir, gymDir string, intent bool) {
	want := map[string][]string{}
	for _, e := range entries {
		line, err := e.MarshalCanonical()
		if err != nil {
			b.Fatal(err)
		}
		sum := sha256.Sum256(line)
		want[e.RolloutID] = append(want[e.RolloutID], hex.EncodeToString(sum[:]))
	}
	suffixes := []string{".tokens.jsonl"}
	if intent {
		suffixes = append(suffixes, ".tokens.intents")
	}
	for _, id := range ids {
		for _, suffix := range suffixes {
			o, err1 := os.ReadFile(filepath.Join(oursDir, id+suffix))
			g, err2 := os.ReadFile(filepath.Join(gymDir, id+suffix))
			if err1 != nil || err2 != nil || !bytes.Equal(o, g) {
				b.Fatalf("rollout %s: our %s and Gym's differ (%d vs %d bytes; %v %v)", id, suffix, len(o), len(g), err1, err2)
			}
		}
	}
	rep, err := gym.s.Do(gympeer.Request{Op: gympeer.OpRead, Dir: oursDir, RolloutIDs: ids})
	if err != nil {
		b.Fatalf("Gym's store reading ours: %v", err)
	}
	fs, err := store.NewFileStore(gymDir)
	if err != nil {
		b.Fatal(err)
	}
	defer fs.Close()
	for _, id := range ids {
		got := rep.Rollouts[id]
		if got.Incomplete || !slices.Equal(got.EntryDigests, want[id]) {
			b.Fatalf("Gym's freeze of our rollout %s read %d records (incomplete %v), not the %d we wrote",
				id, len(got.EntryDigests), got.Incomplete, len(want[id]))
		}
		snap, err := fs.Freeze(context.Background(), id)
		if err != nil {
			b.Fatalf("our freeze of Gym's rollout %s: %v", id, err)
		}
		var digests []string
		for _, e := range snap.Entries {
			line, err := e.MarshalCanonical()
			if err != nil {
				b.Fatal(err)
			}
			sum := sha256.Sum256(line)
			digests = append(digests, hex.EncodeToString(sum[:]))
		}
		if snap.Incomplete || !slices.Equal(digests, want[id]) {
			b.Fatalf("our freeze of Gym's rollout %s read %d records (incomplete %v), not the %d Gym wrote",
				id, len(digests), snap.Incomplete, len(want[id]))
		}
	}
}
