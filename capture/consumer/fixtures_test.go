package consumer_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
)

// gymCase is one target result of a gym-consumer fixture.
type gymCase struct {
	Scenario string
	Variant  string
	dir      string
	expected map[string]any // one element of expected.json results[]
}

type fixtureInput struct {
	EntryPoint string          `json:"entry_point"`
	CaptureDir string          `json:"capture_dir"`
	RolloutID  string          `json:"rollout_id"`
	Kwargs     json.RawMessage `json:"kwargs"`
	Record     json.RawMessage `json:"record"`
}

// loadGymCases reads every result with gym_ref "target".
func loadGymCases() ([]gymCase, string) {
	root := fixturesDir()
	if root == "" {
		return nil, "shared/fixtures not found next to the repository"
	}
	base := filepath.Join(root, "gym-consumer")
	dirs, err := os.ReadDir(base)
	if err != nil {
		return nil, "gym-consumer fixtures not readable: " + err.Error()
	}
	var cases []gymCase
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join(base, d.Name(), "expected.json"))
		if err != nil {
			continue
		}
		var exp struct {
			Results []map[string]any `json:"results"`
		}
		if err := json.Unmarshal(raw, &exp); err != nil {
			continue
		}
		for _, r := range exp.Results {
			if r["gym_ref"] != "target" {
				continue
			}
			cases = append(cases, gymCase{
				Scenario: d.Name(),
				Variant:  r["variant"].(string),
				dir:      filepath.Join(base, d.Name()),
				expected: r,
			})
		}
	}
	sort.Slice(cases, func(i, j int) bool {
		if cases[i].Scenario != cases[j].Scenario {
			return cases[i].Scenario < cases[j].Scenario
		}
		return cases[i].Variant < cases[j].Variant
	})
	return cases, ""
}

// documentedDifferences are the target results where the contract tells Go
// to differ from Gym; each rewrites the expectation to the contract's.
var documentedDifferences = map[string]func(want map[string]any){
	// §6.6: Go answers per_request with the explicit L1 message.
	"22-per-request-builder/per-request": func(want map[string]any) {
		want["error"] = consumer.ErrTextPerRequest
	},
	// §7.4: Go matches the whole id, so a trailing newline is malformed.
	"26-no-capture-key/explicit-id-trailing-newline": func(want map[string]any) {
		text := `malformed rollout id: explicit _ng_rollout_id '26-0\n' is not a valid rollout id`
		for k := range want {
			delete(want, k)
		}
		want["rebuilt_response"] = nil
		want["mask_sample"] = true
		want["error"] = text
		want["metrics"] = map[string]any{"n_calls": float64(0), "error": text}
	},
}

type runOutcome struct {
	returned    any
	result      *consumer.Result
	recordAfter any
	stateID     string
}

func runGymCase(c gymCase) runOutcome {
	inputPath := filepath.Join(c.dir, c.expected["input"].(string))
	raw, err := os.ReadFile(inputPath)
	Expect(err).NotTo(HaveOccurred())
	var in fixtureInput
	Expect(json.Unmarshal(raw, &in)).To(Succeed())
	var kwargs map[string]any
	Expect(decodeUseNumber(in.Kwargs, &kwargs)).To(Succeed())

	opts := consumer.DefaultOptions()
	if v, ok := kwargs["mask_incomplete_when_attributed"].(bool); ok {
		opts.MaskIncompleteWhenAttributed = v
	}
	if v, ok := kwargs["builder"].(string); ok {
		opts.Builder = v
	}
	ctx := context.Background()

	var src store.Source
	tmp := GinkgoT().TempDir()
	if in.EntryPoint == "source" {
		entries, err := readEntries(filepath.Join(c.dir, "snapshot.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		src = &transportSource{rolloutID: in.RolloutID, entries: entries}
	} else {
		Expect(copyDir(filepath.Join(c.dir, in.CaptureDir), tmp)).To(Succeed())
		fsStore, err := store.NewFileStore(tmp)
		Expect(err).NotTo(HaveOccurred())
		src = fsStore
	}

	var out runOutcome
	switch in.EntryPoint {
	case "finalize":
		var rec consumer.Rollout
		Expect(decodeUseNumber(in.Record, &rec)).To(Succeed())
		out.result = consumer.Finalize(ctx, rec, src, opts)
		out.recordAfter = generic(rec)
	default:
		model, _ := kwargs["model"].(string)
		input := consumer.Input{Model: model}
		if vr, ok := kwargs["verified_response"].(map[string]any); ok {
			input.Response = vr
		}
		res, err := consumer.Consume(ctx, src, in.RolloutID, input, opts)
		Expect(err).NotTo(HaveOccurred())
		out.result = res
	}
	if out.result != nil {
		out.returned = generic(out.result)
	}
	if in.EntryPoint != "source" {
		if b, err := os.ReadFile(filepath.Join(tmp, in.RolloutID+".tokens.state.json")); err == nil {
			var st map[string]any
			if json.Unmarshal(b, &st) == nil {
				out.stateID, _ = st["snapshot_id"].(string)
			}
		}
	}
	return out
}

var snapshotIDPattern = regexp.MustCompile(`^[0-9a-f]{32}$`)

// normaliseSnapshot checks the random snapshot id and removes it from both
// sides, keeping the version comparison.
func normaliseSnapshot(got, want map[string]any, stateID string) {
	ws, wok := want["_capture_snapshot"].(map[string]any)
	gs, gok := got["_capture_snapshot"].(map[string]any)
	Expect(gok).To(Equal(wok), "presence of _capture_snapshot")
	if !wok {
		return
	}
	if ws["snapshot_id"] == "transport-snapshot" {
		Expect(gs["snapshot_id"]).To(Equal("transport-snapshot"))
	} else {
		Expect(gs["snapshot_id"]).To(MatchRegexp(snapshotIDPattern.String()))
		Expect(gs["snapshot_id"]).To(Equal(stateID), "snapshot id must equal the state file's")
	}
	delete(ws, "snapshot_id")
	delete(gs, "snapshot_id")
}

func gymCaseEntries() []TableEntry {
	cases, skip := loadGymCases()
	if skip != "" {
		return []TableEntry{Entry("fixtures unavailable", gymCase{Scenario: "", Variant: skip})}
	}
	entries := make([]TableEntry, 0, len(cases))
	for _, c := range cases {
		entries = append(entries, Entry(c.Scenario+"/"+c.Variant, c))
	}
	return entries
}

var _ = Describe("NeMo Gym consumer fixtures (gym_ref target)", func() {
	DescribeTable("agrees with Gym field by field",
		func(c gymCase) {
			if c.Scenario == "" {
				Skip(c.Variant)
			}
			key := c.Scenario + "/" + c.Variant
			out := runGymCase(c)

			wantReturned, _ := generic(c.expected["returned"]).(map[string]any)
			if wantReturned == nil {
				Expect(out.result).To(BeNil())
				return
			}
			Expect(out.result).NotTo(BeNil())
			got := out.returned.(map[string]any)
			if fix, ok := documentedDifferences[key]; ok {
				fix(wantReturned)
			}
			normaliseSnapshot(got, wantReturned, out.stateID)
			Expect(diff("returned", got, wantReturned)).To(BeEmpty())

			// The rebuilt token arrays, item by item.
			if wantGen, ok := c.expected["generation_token_ids_of_rebuilt_response"].([]any); ok && out.result.RebuiltResponse != nil {
				var gotGen []any
				for _, it := range generic(out.result.RebuiltResponse["output"]).([]any) {
					if g, ok := it.(map[string]any)["generation_token_ids"]; ok && g != nil {
						gotGen = append(gotGen, g)
					}
				}
				Expect(diff("generation_token_ids", gotGen, wantGen)).To(BeEmpty())
			}

			// The record as delivery left it.
			if wantRecord, ok := generic(c.expected["record_after"]).(map[string]any); ok {
				gotRecord := out.recordAfter.(map[string]any)
				if fix, ok := documentedDifferences[key]; ok && strings.Contains(key, "trailing-newline") {
					wantTC := map[string]any{}
					fix(wantTC)
					wantRecord["_ng_token_capture"] = wantTC["metrics"]
				}
				if _, ok := documentedDifferences[key]; ok && strings.Contains(key, "per-request") {
					wantRecord["_ng_token_capture"].(map[string]any)["error"] = consumer.ErrTextPerRequest
				}
				Expect(diff("record_after", gotRecord, wantRecord)).To(BeEmpty())
			}
		},
		gymCaseEntries(),
	)
})
