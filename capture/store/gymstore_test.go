package store_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// gymCase is a gym-store fixture case.json.
type gymCase struct {
	Case       string  `json:"case"`
	RolloutID  string  `json:"rollout_id"`
	Operations []gymOp `json:"operations"`
}

type gymOp struct {
	Op         string                     `json:"op"`
	Args       map[string]json.RawMessage `json:"args"`
	Result     json.RawMessage            `json:"result"`
	Error      *struct{ Type, Message string }
	StateAfter map[string]json.RawMessage `json:"state_after"`
	FilesAfter map[string]int64           `json:"files_after"`
}

type gymFreeze struct {
	ModelCallIDs []string `json:"model_call_ids"`
	Incomplete   bool     `json:"incomplete"`
	Version      int      `json:"version"`
	SnapshotID   string   `json:"snapshot_id"`
}

func loadGymCase(dir string) gymCase {
	data, err := os.ReadFile(filepath.Join(dir, "case.json"))
	Expect(err).NotTo(HaveOccurred())
	// Python's json writes a NaN log-prob as the bare token NaN.
	data = bytes.ReplaceAll(data, []byte(" NaN"), []byte(" null"))
	var c gymCase
	Expect(json.Unmarshal(data, &c)).To(Succeed())
	return c
}

func gymCaseDirs(ref string) []string {
	root, ok := fixturesDir(filepath.Join("gym-store", ref))
	if !ok {
		return nil
	}
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(root, e.Name()))
		}
	}
	return dirs
}

func decodeUseNumber(raw []byte) map[string]any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	Expect(dec.Decode(&m)).To(Succeed())
	return m
}

// entryFromGym turns args.entry into our record plus the exact line Gym
// wrote for it. A null log-prob (Gym's NaN) becomes NaN again.
func entryFromGym(raw json.RawMessage) (*record.Entry, []byte) {
	m := decodeUseNumber(raw)
	gymLine, err := record.Canonical(m)
	Expect(err).NotTo(HaveOccurred())
	lps, _ := m["generation_log_probs"].([]any)
	var nanAt []int
	for i, v := range lps {
		if v == nil {
			lps[i] = json.Number("0")
			nanAt = append(nanAt, i)
		}
	}
	clean, err := record.Canonical(m)
	Expect(err).NotTo(HaveOccurred())
	e, err := record.ParseLine(clean)
	Expect(err).NotTo(HaveOccurred())
	for _, i := range nanAt {
		e.GenerationLogProbs[i] = math.NaN()
	}
	return e, gymLine
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// expectGymError maps Gym's exception to our sentinel errors.
func expectGymError(err error, gymErr *struct{ Type, Message string }) {
	Expect(err).To(HaveOccurred(), "Gym raised %s: %s", gymErr.Type, gymErr.Message)
	switch {
	case gymErr.Type == "RuntimeError" && strings.Contains(gymErr.Message, "retired"):
		Expect(err).To(MatchError(store.ErrRetired))
	case gymErr.Type == "RuntimeError" && strings.Contains(gymErr.Message, "frozen"):
		Expect(err).To(MatchError(store.ErrFrozen))
	case gymErr.Type == "ValueError" && strings.Contains(gymErr.Message, "Invalid rollout id"):
		Expect(err).To(MatchError(store.ErrInvalidRolloutID))
	case gymErr.Type == "ValueError":
		Expect(err).To(MatchError(store.ErrConflict))
	case gymErr.Type == "JSONDecodeError":
		Expect(err).To(MatchError(store.ErrCorrupt))
	case gymErr.Type == "ValidationError":
		Expect(err).To(MatchError(store.ErrCorrupt))
		Expect(err).To(MatchError(record.ErrInvalid))
		if strings.Contains(gymErr.Message, "below the supported minimum") {
			Expect(err).To(MatchError(record.ErrSchemaTooOld))
		}
	default:
		Fail("unmapped Gym error type " + gymErr.Type)
	}
}

func readDirSizes(dir string) map[string]int64 {
	out := map[string]int64{}
	entries, err := os.ReadDir(dir)
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tokens-") {
			continue // a temp file would be a leak; asserted elsewhere
		}
		fi, err := e.Info()
		Expect(err).NotTo(HaveOccurred())
		out[e.Name()] = fi.Size()
	}
	return out
}

func copyDir(src, dst string) {
	entries, err := os.ReadDir(src)
	Expect(err).NotTo(HaveOccurred())
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644)).To(Succeed())
	}
}

func stateAsJSON(st store.State) map[string]any {
	b, err := st.MarshalCanonical()
	Expect(err).NotTo(HaveOccurred())
	return decodeUseNumber(b)
}

func rawStateAsJSON(raw map[string]json.RawMessage) map[string]any {
	b, err := json.Marshal(raw)
	Expect(err).NotTo(HaveOccurred())
	return decodeUseNumber(b)
}

// replayGymCase runs a docs-extras case's operations against a FileStore
// and compares every step. With eager state writes (Gym's layout) the state
// file itself is compared; with lazy ones (the default) the state the store
// reports, which is what any reader reconstructs from the files.
func replayGymCase(caseDir string, lazy bool) {
	ctx := context.Background()
	c := loadGymCase(caseDir)
	dir := GinkgoT().TempDir()
	var opts []store.FileOption
	if !lazy {
		opts = append(opts, store.WithStateWriteEveryPut())
	}
	s, err := store.NewFileStore(dir, opts...)
	Expect(err).NotTo(HaveOccurred())
	defer s.Close()

	var bigLines [][]byte // case 21: the records are the JSONL lines of files/
	if data, err := os.ReadFile(filepath.Join(caseDir, "files", c.RolloutID+".tokens.jsonl")); err == nil {
		bigLines = bytes.SplitAfter(data, []byte("\n"))
	}
	bigNext := 0
	snapshots := map[string]string{} // Gym snapshot id -> ours
	jsonlName := c.RolloutID + ".tokens.jsonl"

	for i, op := range c.Operations {
		step := fmt.Sprintf("%s step %d (%s)", c.Case, i, op.Op)
		var err error
		var arg = func(k string) string {
			var v string
			Expect(json.Unmarshal(op.Args[k], &v)).To(Succeed(), step)
			return v
		}
		switch op.Op {
		case "begin_call":
			err = s.BeginCall(ctx, arg("rollout_id"), arg("model_call_id"))
		case "mark_incomplete":
			err = s.MarkIncomplete(ctx, arg("rollout_id"), arg("model_call_id"))
		case "put":
			var e *record.Entry
			var gymLine []byte
			if raw, ok := op.Args["entry"]; ok {
				e, gymLine = entryFromGym(raw)
			} else {
				line := bigLines[bigNext]
				bigNext++
				Expect(sha(line)).To(Equal(arg("entry_sha256")), step)
				gymLine = bytes.TrimSuffix(line, []byte("\n"))
				e, err = record.ParseLine(gymLine)
				Expect(err).NotTo(HaveOccurred(), step)
			}
			if b, merr := e.MarshalCanonical(); merr == nil {
				// A record read from a Gym line re-encodes to the same bytes
				// (fields the line lacked, like response_id, stay absent).
				Expect(string(b)).To(Equal(string(gymLine)), "%s: our canonical line must be Gym's", step)
			}
			before := readDirSizes(dir)[jsonlName]
			err = s.Put(ctx, e)
			if err != nil && op.Error == nil {
				// Gym writes a NaN log-prob as null and accepts the put; a Go
				// writer must refuse it (contract §1.3). Continue from the
				// bytes Gym left so the later steps stay comparable.
				Expect(err).To(MatchError(record.ErrInvalid), step)
				Expect(readDirSizes(dir)[jsonlName]).To(Equal(before), "%s: nothing half-written", step)
				f, ferr := os.OpenFile(filepath.Join(dir, jsonlName), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
				Expect(ferr).NotTo(HaveOccurred())
				_, ferr = f.Write(append(gymLine, '\n'))
				Expect(ferr).NotTo(HaveOccurred())
				Expect(f.Close()).To(Succeed())
				stateBytes, jerr := json.Marshal(op.StateAfter)
				Expect(jerr).NotTo(HaveOccurred())
				st, perr := store.ParseState(stateBytes)
				Expect(perr).NotTo(HaveOccurred())
				stateBytes, jerr = st.MarshalCanonical()
				Expect(jerr).NotTo(HaveOccurred())
				stateBytes = append(stateBytes, '\n')
				Expect(os.WriteFile(filepath.Join(dir, c.RolloutID+".tokens.state.json"), stateBytes, 0o600)).To(Succeed())
				err = nil
			}
		case "append_bytes_by_hand":
			b, derr := base64.StdEncoding.DecodeString(arg("bytes_base64"))
			Expect(derr).NotTo(HaveOccurred())
			f, ferr := os.OpenFile(filepath.Join(dir, arg("file")), os.O_WRONLY|os.O_APPEND, 0)
			Expect(ferr).NotTo(HaveOccurred())
			_, ferr = f.Write(b)
			Expect(ferr).NotTo(HaveOccurred())
			Expect(f.Close()).To(Succeed())
		case "freeze":
			var snap *store.Snapshot
			snap, err = s.Freeze(ctx, arg("rollout_id"))
			if err == nil && op.Error == nil {
				var want gymFreeze
				Expect(json.Unmarshal(op.Result, &want)).To(Succeed())
				Expect(callIDs(snap)).To(Equal(want.ModelCallIDs), step)
				Expect(snap.Incomplete).To(Equal(want.Incomplete), step)
				Expect(snap.Version).To(Equal(want.Version), step)
				Expect(snap.SnapshotID).To(MatchRegexp(snapshotIDPattern.String()))
				if prev, ok := snapshots[want.SnapshotID]; ok {
					Expect(snap.SnapshotID).To(Equal(prev), "%s: later freezes keep the snapshot id", step)
				}
				snapshots[want.SnapshotID] = snap.SnapshotID
			}
		case "drop":
			var ok bool
			var version int
			Expect(json.Unmarshal(op.Args["version"], &version)).To(Succeed())
			sid := arg("snapshot_id")
			if ours, found := snapshots[sid]; found {
				sid = ours
			}
			ok, err = s.Drop(ctx, arg("rollout_id"), sid, version)
			if err == nil {
				var want bool
				Expect(json.Unmarshal(op.Result, &want)).To(Succeed())
				Expect(ok).To(Equal(want), step)
			}
		case "delete":
			err = s.Delete(ctx, arg("rollout_id"))
		case "sweep_retired":
			var n int
			n, err = s.SweepRetired(ctx, 0)
			if err == nil {
				var want int
				Expect(json.Unmarshal(op.Result, &want)).To(Succeed())
				Expect(n).To(Equal(want), step)
			}
		default:
			Fail("unknown op " + op.Op)
		}
		if op.Error != nil {
			expectGymError(err, op.Error)
		} else {
			Expect(err).NotTo(HaveOccurred(), step)
		}

		By("comparing the state after " + step)
		statePath := filepath.Join(dir, c.RolloutID+".tokens.state.json")
		if lazy {
			// compared after the files: reading the state takes the lock,
			// which recreates a swept lock file
		} else if op.StateAfter == nil {
			Expect(statePath).NotTo(BeAnExistingFile(), step)
		} else {
			data, rerr := os.ReadFile(statePath)
			Expect(rerr).NotTo(HaveOccurred(), step)
			Expect(data).To(HaveSuffix("\n"))
			got := decodeUseNumber(data)
			want := rawStateAsJSON(op.StateAfter)
			// Only the random snapshot id differs.
			if sid := want["snapshot_id"].(string); sid != "" {
				if _, ok := snapshots[sid]; !ok {
					// A freeze that failed after freezing (case 14) returned
					// no snapshot; its id is only in the state.
					ours, _ := got["snapshot_id"].(string)
					Expect(ours).To(MatchRegexp(snapshotIDPattern.String()), step)
					snapshots[sid] = ours
				}
				want["snapshot_id"] = snapshots[sid]
			}
			Expect(got).To(Equal(want), step)
			// The state is written canonically, exactly as Gym writes it.
			st, perr := store.ParseState(data)
			Expect(perr).NotTo(HaveOccurred())
			canon, merr := st.MarshalCanonical()
			Expect(merr).NotTo(HaveOccurred())
			Expect(string(data)).To(Equal(string(canon) + "\n"))
		}
		gotFiles := readDirSizes(dir)
		// Sizes match exactly: a snapshot id is always 32 characters.
		wantFiles := op.FilesAfter
		if lazy {
			wantFiles = withoutState(wantFiles)
			gotFiles = withoutState(gotFiles)
		}
		Expect(gotFiles).To(Equal(wantFiles), step)
		// Gym's state after a hand append is the one before any reader
		// reconciled the new bytes, and after a sweep there is no state
		// (reading it would recreate the swept lock file).
		if lazy && op.Op != "append_bytes_by_hand" && op.Op != "sweep_retired" &&
			store.ValidateRolloutID(c.RolloutID) == nil {
			compareLogicalState(s, c.RolloutID, op.StateAfter, snapshots, step)
		}
	}

	By("comparing the final files with Gym's byte for byte")
	for _, suffix := range []string{".tokens.intents", ".tokens.incomplete", ".tokens.lock"} {
		want, werr := os.ReadFile(filepath.Join(caseDir, "files", c.RolloutID+suffix))
		got, gerr := os.ReadFile(filepath.Join(dir, c.RolloutID+suffix))
		Expect(errors.Is(gerr, os.ErrNotExist)).To(Equal(errors.Is(werr, os.ErrNotExist)), suffix)
		Expect(string(got)).To(Equal(string(want)), suffix)
	}
	if want, werr := os.ReadFile(filepath.Join(caseDir, "files", jsonlName)); werr == nil {
		got, gerr := os.ReadFile(filepath.Join(dir, jsonlName))
		Expect(gerr).NotTo(HaveOccurred())
		Expect(string(got)).To(Equal(string(want)))
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".tokens-*"))
	Expect(leftovers).To(BeEmpty(), "no temp file may be left behind")
}

// readGymCase freezes a copy of the directory Gym left and compares the
// snapshot with Gym's last freeze.
func readGymCase(caseDir string, ref string) {
	ctx := context.Background()
	c := loadGymCase(caseDir)
	src := filepath.Join(caseDir, "files")
	repaired := slices.Contains([]string{"08", "09", "15"}, c.Case[:2])
	if repaired {
		src = filepath.Join(caseDir, "files-before-last-freeze")
	}
	if _, err := os.Stat(src); err != nil {
		Skip("Gym left no files in " + c.Case)
	}
	var last *gymOp
	for i := range c.Operations {
		if c.Operations[i].Op == "freeze" {
			last = &c.Operations[i]
		}
	}
	if last == nil {
		Skip("no freeze in " + c.Case)
	}
	dir := GinkgoT().TempDir()
	copyDir(src, dir)
	s, err := store.NewFileStore(dir)
	Expect(err).NotTo(HaveOccurred())
	defer s.Close()
	before, err := s.State(ctx, c.RolloutID)
	beforeErr := err
	snap, err := s.Freeze(ctx, c.RolloutID)
	hasLines := false
	if data, rerr := os.ReadFile(filepath.Join(src, c.RolloutID+".tokens.jsonl")); rerr == nil && len(bytes.TrimSpace(data)) > 0 {
		hasLines = true
	}
	if ref == "main" && hasLines {
		// Schema-1 records are below the reader floor: refused loudly.
		// Where Gym's own reader failed too, the damage is reported first.
		if last.Error != nil {
			Expect(err).To(MatchError(store.ErrCorrupt))
		} else {
			Expect(err).To(MatchError(record.ErrSchemaTooOld))
		}
		return
	}
	if last.Error != nil {
		expectGymError(err, last.Error)
		return
	}
	Expect(err).NotTo(HaveOccurred())
	var want gymFreeze
	Expect(json.Unmarshal(last.Result, &want)).To(Succeed())
	Expect(callIDs(snap)).To(Equal(want.ModelCallIDs))
	Expect(snap.Incomplete).To(Equal(want.Incomplete))
	Expect(snap.Version).To(Equal(want.Version))
	if beforeErr == nil && before.Frozen {
		Expect(snap.SnapshotID).To(Equal(want.SnapshotID), "an already frozen rollout keeps Gym's snapshot id")
	}
	if repaired {
		for _, suffix := range []string{".tokens.jsonl", ".tokens.intents"} {
			want, _ := os.ReadFile(filepath.Join(caseDir, "files", c.RolloutID+suffix))
			got, _ := os.ReadFile(filepath.Join(dir, c.RolloutID+suffix))
			Expect(string(got)).To(Equal(string(want)), suffix)
		}
		want, _ := os.ReadFile(filepath.Join(caseDir, "files", c.RolloutID+".tokens.state.json"))
		got, _ := os.ReadFile(filepath.Join(dir, c.RolloutID+".tokens.state.json"))
		wantJSON, gotJSON := decodeUseNumber(want), decodeUseNumber(got)
		Expect(gotJSON["snapshot_id"]).To(MatchRegexp(snapshotIDPattern.String()))
		delete(wantJSON, "snapshot_id")
		delete(gotJSON, "snapshot_id")
		Expect(gotJSON).To(Equal(wantJSON))
	}
}

var _ = Describe("Gym file-store interoperability", func() {
	docsExtras := gymCaseDirs("docs-extras")
	mainRef := gymCaseDirs("main")
	if len(docsExtras) == 0 {
		It("needs the gym-store fixtures", func() {
			Skip("shared/fixtures/gym-store not found next to the repository")
		})
		return
	}

	var replay, readDocs, readMain []TableEntry
	for _, d := range docsExtras {
		replay = append(replay, Entry(filepath.Base(d), d))
		readDocs = append(readDocs, Entry(filepath.Base(d), d, "docs-extras"))
	}
	for _, d := range mainRef {
		readMain = append(readMain, Entry(filepath.Base(d), d, "main"))
	}
	DescribeTable("writes what Gym writes, step by step (docs-extras)",
		func(d string) { replayGymCase(d, false) }, replay)
	DescribeTable("reports Gym's state at every step with lazy state writes (docs-extras)",
		func(d string) { replayGymCase(d, true) }, replay)
	DescribeTable("reads and repairs Gym's directories as Gym does (docs-extras)", readGymCase, readDocs)
	DescribeTable("refuses Gym's schema-1 records loudly (main)", readGymCase, readMain)

	It("reproduces Gym's NaN failure order: the freeze fails after freezing the state", func() {
		caseDir := filepath.Join(filepath.Dir(docsExtras[0]), "14-nan-logprob-unreadable")
		c := loadGymCase(caseDir)
		dir := GinkgoT().TempDir()
		copyDir(filepath.Join(caseDir, "files"), dir)
		// Rewind the state to what it was before Gym's freeze.
		stateBytes, err := json.Marshal(c.Operations[1].StateAfter)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(filepath.Join(dir, c.RolloutID+".tokens.state.json"), stateBytes, 0o600)).To(Succeed())
		s, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		ctx := context.Background()
		_, err = s.Freeze(ctx, c.RolloutID)
		Expect(err).To(MatchError(record.ErrInvalid))
		st, err := s.State(ctx, c.RolloutID)
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Frozen).To(BeTrue())
		Expect(st.Version).To(Equal(2))
		Expect(s.Put(ctx, newEntry(c.RolloutID, "late"))).To(MatchError(store.ErrFrozen))
	})

	It("writes Gym's exact bytes for target-schema records (response_id included)", func() {
		root, ok := fixturesDir("gym-consumer")
		if !ok {
			Skip("gym-consumer fixtures not found")
		}
		captures, err := filepath.Glob(filepath.Join(root, "*", "capture", "*.tokens.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		Expect(captures).NotTo(BeEmpty())
		compared := 0
		for _, path := range captures {
			data, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			dir := GinkgoT().TempDir()
			s, err := store.NewFileStore(dir, store.WithStateWriteEveryPut())
			Expect(err).NotTo(HaveOccurred())
			clean := true
			for _, line := range bytes.SplitAfter(data, []byte("\n")) {
				if len(bytes.TrimSpace(line)) == 0 {
					continue
				}
				e, err := record.ParseLine(line)
				Expect(err).NotTo(HaveOccurred(), path)
				if err := s.Put(context.Background(), e); err != nil {
					clean = false // a fixture that appended a conflicting line by hand
					break
				}
			}
			if !clean {
				continue
			}
			got, err := os.ReadFile(filepath.Join(dir, filepath.Base(path)))
			Expect(err).NotTo(HaveOccurred())
			Expect(string(got)).To(Equal(string(data)), path)
			gymState, err := os.ReadFile(strings.TrimSuffix(path, ".jsonl") + ".state.json")
			Expect(err).NotTo(HaveOccurred())
			ourState, err := os.ReadFile(filepath.Join(dir, strings.TrimSuffix(filepath.Base(path), ".jsonl")+".state.json"))
			Expect(err).NotTo(HaveOccurred())
			g, o := decodeUseNumber(gymState), decodeUseNumber(ourState)
			Expect(o["entry_digests"]).To(Equal(g["entry_digests"]), path)
			Expect(o["indexed_size"]).To(Equal(g["indexed_size"]), path)
			compared++
		}
		Expect(compared).To(BeNumerically(">", 10))
	})
})

func withoutState(files map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range files {
		if !strings.HasSuffix(k, ".tokens.state.json") {
			out[k] = v
		}
	}
	return out
}

// compareLogicalState checks the state a lazily writing store reports
// against Gym's state file after the same step.
func compareLogicalState(s *store.FileStore, rolloutID string, want map[string]json.RawMessage, snapshots map[string]string, step string) {
	st, err := s.State(context.Background(), rolloutID)
	if err != nil {
		// Only a damaged file can make the reconstruction fail; Gym's
		// state then is the one it had before the damage.
		Expect(err).To(MatchError(store.ErrCorrupt), step)
		return
	}
	if want == nil {
		Expect(st.Version).To(BeZero(), step)
		Expect(st.EntryDigests).To(BeEmpty(), step)
		return
	}
	got := stateAsJSON(st)
	w := rawStateAsJSON(want)
	if sid := w["snapshot_id"].(string); sid != "" {
		if _, ok := snapshots[sid]; !ok {
			snapshots[sid] = got["snapshot_id"].(string)
		}
		w["snapshot_id"] = snapshots[sid]
	}
	Expect(got).To(Equal(w), step)
}
