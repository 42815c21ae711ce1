package doctor_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/internal/fixtures"
)

// healthyRow is the walkthrough's healthy single-call row.
func healthyRow() map[string]any {
	return map[string]any{
		"_ng_rollout_id": "r1",
		"response": map[string]any{"output": []any{map[string]any{
			"type": "message", "generation_token_ids": []any{1, 2}, "generation_log_probs": []any{-0.1, -0.2}}}},
		"_ng_token_capture": map[string]any{
			"n_calls": 1, "chains": 1, "roots": 1, "delivered_fraction": 1.0, "quarantined_calls": 0,
			"unresolved_parent_calls": 0, "empty_generation_calls": 0,
			"terminal_attribution": map[string]any{"chain": "", "method": "none"},
		},
	}
}

func rowsJSONL(rows ...map[string]any) string {
	var sb strings.Builder
	for _, r := range rows {
		b, err := json.Marshal(r)
		Expect(err).NotTo(HaveOccurred())
		sb.Write(b)
		sb.WriteByte('\n')
	}
	return sb.String()
}

func metrics(r map[string]any) map[string]any { return r["_ng_token_capture"].(map[string]any) }

func rules(rep *doctor.Report, sev doctor.Severity) []string {
	var out []string
	for _, f := range rep.Findings {
		if f.Severity == sev {
			out = append(out, f.Rule)
		}
	}
	return out
}

var _ = Describe("doctor rollouts", func() {
	DescribeTable("one rule per symptom, each with a failing and a passing row",
		func(mutate func(map[string]any), o doctor.RolloutOptions, wantRule string, sev doctor.Severity) {
			row := healthyRow()
			if mutate != nil {
				mutate(row)
			}
			rep, err := doctor.CheckRollouts(strings.NewReader(rowsJSONL(row)), o)
			Expect(err).NotTo(HaveOccurred())
			if wantRule == "" {
				Expect(rep.Findings).To(BeEmpty())
				Expect(rep.Rollouts[0].Healthy).To(BeTrue())
				return
			}
			Expect(rules(rep, sev)).To(ContainElement(wantRule), "%+v", rep.Findings)
			for _, f := range rep.Findings {
				if f.Rule == wantRule {
					Expect(f.Fix).NotTo(BeEmpty())
					Expect(f.Subject).To(Equal("r1"))
					Expect(f.Line).To(Equal(1))
				}
			}
		},
		Entry("healthy single call passes", nil, doctor.RolloutOptions{}, "", doctor.Error),
		Entry("healthy delivered chain passes", func(r map[string]any) {
			metrics(r)["terminal_attribution"] = map[string]any{"chain": "delivered"}
		}, doctor.RolloutOptions{}, "", doctor.Error),
		Entry("healthy three calls with tools expected passes", func(r map[string]any) { metrics(r)["n_calls"] = 3 },
			doctor.RolloutOptions{ExpectTools: true}, "", doctor.Error),
		Entry("no _ng_token_capture", func(r map[string]any) { delete(r, "_ng_token_capture") }, doctor.RolloutOptions{}, "rollouts/no-capture", doctor.Error),
		Entry("masked", func(r map[string]any) { r["mask_sample"] = true; metrics(r)["roots"] = 2 }, doctor.RolloutOptions{}, "rollouts/masked", doctor.Error),
		Entry("mask_sample not a boolean", func(r map[string]any) { r["mask_sample"] = "yes" }, doctor.RolloutOptions{}, "rollouts/mask-not-bool", doctor.Error),
		Entry("one call where tools were expected", nil, doctor.RolloutOptions{ExpectTools: true}, "rollouts/one-call", doctor.Error),
		Entry("two chains, unattributed", func(r map[string]any) { metrics(r)["chains"] = 2 }, doctor.RolloutOptions{}, "rollouts/unattributed-chains", doctor.Error),
		Entry("two chains, attributed", func(r map[string]any) {
			metrics(r)["chains"] = 2
			metrics(r)["terminal_attribution"] = map[string]any{"chain": "delivered"}
		}, doctor.RolloutOptions{}, "rollouts/chains", doctor.Warning),
		Entry("broken terminal chain", func(r map[string]any) {
			metrics(r)["terminal_attribution"] = map[string]any{"chain": "broken"}
		}, doctor.RolloutOptions{}, "rollouts/terminal-chain", doctor.Error),
		Entry("capture incomplete", func(r map[string]any) { metrics(r)["capture_incomplete"] = true }, doctor.RolloutOptions{}, "rollouts/capture-incomplete", doctor.Error),
		Entry("no token records", func(r map[string]any) {
			metrics(r)["error"] = "capture contains no token records"
			metrics(r)["n_calls"] = 0
		}, doctor.RolloutOptions{}, "rollouts/capture-error", doctor.Error),
		Entry("unresolved parents", func(r map[string]any) { metrics(r)["unresolved_parent_calls"] = 1 }, doctor.RolloutOptions{}, "rollouts/unresolved-parents", doctor.Warning),
		Entry("empty generation", func(r map[string]any) { metrics(r)["empty_generation_calls"] = 1 }, doctor.RolloutOptions{}, "rollouts/empty-generation", doctor.Warning),
		Entry("quarantined retry", func(r map[string]any) { metrics(r)["quarantined_calls"] = 1 }, doctor.RolloutOptions{}, "rollouts/quarantined", doctor.Info),
		Entry("output without generation tokens", func(r map[string]any) {
			r["response"] = map[string]any{"output": []any{map[string]any{"type": "message", "content": "hi"}}}
		}, doctor.RolloutOptions{}, "rollouts/no-generation-tokens", doctor.Error),
		Entry("log-probs that do not match the ids", func(r map[string]any) {
			r["response"] = map[string]any{"output": []any{map[string]any{"generation_token_ids": []any{1, 2}, "generation_log_probs": []any{-0.1}}}}
		}, doctor.RolloutOptions{}, "rollouts/no-generation-tokens", doctor.Error),
	)

	It("tells text-only rows from uncaptured ones with --capture-dir", func() {
		dir := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(dir, "r1.tokens.jsonl"), []byte("{}\n{}\n"), 0o644)).To(Succeed())
		row := healthyRow()
		delete(row, "_ng_token_capture")
		other := healthyRow()
		other["_ng_rollout_id"] = "r2"
		delete(other, "_ng_token_capture")
		rep, err := doctor.CheckRollouts(strings.NewReader(rowsJSONL(row, other)), doctor.RolloutOptions{CaptureDir: dir})
		Expect(err).NotTo(HaveOccurred())
		Expect(rules(rep, doctor.Error)).To(ConsistOf("rollouts/text-only", "rollouts/no-capture", "rollouts/no-capture-anywhere"))
		Expect(rep.Rollouts[0].Records).To(Equal(2))
		Expect(rep.Findings[0].Message).To(ContainSubstring("holds 2 record(s)"))
		Expect(rep.Findings[0].Fix).To(ContainSubstring("gym eval run --no-serve --config"))
	})

	It("flags every rollout being one call, as a note without --expect-tools", func() {
		a, b := healthyRow(), healthyRow()
		b["_ng_rollout_id"] = "r2"
		rep, err := doctor.CheckRollouts(strings.NewReader(rowsJSONL(a, b)), doctor.RolloutOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(rules(rep, doctor.Info)).To(ContainElement("rollouts/one-call-everywhere"))
		Expect(rep.OK()).To(BeTrue())
		Expect(rep.Aggregate).To(Equal(&doctor.Aggregate{Rows: 2, WithCapture: 2, OneCall: 2, Healthy: 2, MeanCalls: 1}))
	})

	It("reports lines that are not JSON and refuses an empty file", func() {
		rep, err := doctor.CheckRollouts(strings.NewReader(rowsJSONL(healthyRow())+"{not json\n"), doctor.RolloutOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(rules(rep, doctor.Error)).To(Equal([]string{"rollouts/not-json"}))
		Expect(rep.Findings[0].Line).To(Equal(2))
		_, err = doctor.CheckRollouts(strings.NewReader("\n"), doctor.RolloutOptions{})
		Expect(err).To(MatchError(ContainSubstring("empty")))
	})

	Context("on rollouts written by NeMo Gym's collector", func() {
		var dir string
		BeforeEach(func() {
			d, ok := fixtures.Dir()
			if !ok {
				Skip("shared fixtures not found next to the repository")
			}
			dir = filepath.Join(d, "gym-rollouts")
		})

		DescribeTable("finds the healthy, masked, uncaptured and single-call rows", func(file string) {
			rep, err := doctor.CheckRolloutsFile(filepath.Join(dir, file), doctor.RolloutOptions{CaptureDir: filepath.Join(dir, "capture")})
			Expect(err).NotTo(HaveOccurred())
			Expect(rep.Rollouts).To(HaveLen(4))
			byID := map[string]doctor.RolloutRow{}
			for _, r := range rep.Rollouts {
				byID[r.ID] = r
			}
			Expect(byID["101-0"].Healthy).To(BeTrue())
			Expect(byID["101-0"].NCalls).To(Equal(3))
			Expect(byID["101-0"].Records).To(Equal(3))
			Expect(byID["102-0"].Masked).To(BeTrue())
			Expect(byID["103-0"].HasCapture).To(BeFalse())
			Expect(byID["103-0"].Records).To(Equal(0))
			Expect(byID["104-0"].NCalls).To(Equal(1))
			Expect(byID["104-0"].Healthy).To(BeTrue())
			bySubject := map[string][]string{}
			for _, f := range rep.Findings {
				if f.Severity == doctor.Error {
					bySubject[f.Subject] = append(bySubject[f.Subject], f.Rule)
				}
			}
			Expect(bySubject).To(Equal(map[string][]string{"102-0": {"rollouts/masked"}, "103-0": {"rollouts/no-capture"}}))
			Expect(rep.Aggregate.Masked).To(Equal(1))
			Expect(rep.Aggregate.WithCapture).To(Equal(3))
		},
			Entry("the target finalizer's rows", "rollouts.jsonl"),
			Entry("the docs-extras finalizer's rows (no attribution)", "rollouts.docs-extras.jsonl"),
		)

		It("fails the single-call row when tools were expected", func() {
			rep, err := doctor.CheckRolloutsFile(filepath.Join(dir, "rollouts.jsonl"), doctor.RolloutOptions{ExpectTools: true})
			Expect(err).NotTo(HaveOccurred())
			var oneCall []string
			for _, f := range rep.Findings {
				if f.Rule == "rollouts/one-call" {
					oneCall = append(oneCall, f.Subject)
				}
			}
			Expect(oneCall).To(Equal([]string{"104-0"}))
		})
	})
})
