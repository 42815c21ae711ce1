package consumer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
)

func jsonLines(b []byte) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var m map[string]any
		Expect(json.Unmarshal(sc.Bytes(), &m)).To(Succeed())
		out = append(out, m)
	}
	return out
}

var _ = Describe("finalizing a rollouts file (gym-rollouts fixture)", func() {
	It("writes what Gym's collector wrote and retires only unmasked, written builds", func() {
		root := fixturesDir()
		if root == "" {
			Skip("shared/fixtures not found next to the repository")
		}
		base := filepath.Join(root, "gym-rollouts")
		tmp := GinkgoT().TempDir()
		Expect(copyDir(filepath.Join(base, "capture"), filepath.Join(tmp, "capture"))).To(Succeed())

		// Only rows the collector finalizes; _fixture is not part of a record.
		raw, err := os.ReadFile(filepath.Join(base, "inputs.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		var in bytes.Buffer
		var finalizedTasks []any
		for _, row := range jsonLines(raw) {
			fx := row["_fixture"].(map[string]any)
			delete(row, "_fixture")
			if fx["finalize"] != true {
				continue
			}
			finalizedTasks = append(finalizedTasks, row["_ng_task_index"])
			b, _ := json.Marshal(row)
			in.Write(append(b, '\n'))
		}
		Expect(finalizedTasks).NotTo(BeEmpty())

		fs, err := store.NewFileStore(filepath.Join(tmp, "capture"))
		Expect(err).NotTo(HaveOccurred())
		outPath := filepath.Join(tmp, "out.jsonl")
		w, err := consumer.CreateWriter(outPath)
		Expect(err).NotTo(HaveOccurred())
		sum, err := consumer.FinalizeRollouts(context.Background(), &in, w, fs, consumer.DefaultOptions(), &consumer.KillSwitch{})
		Expect(err).NotTo(HaveOccurred())
		Expect(w.Close()).To(Succeed())
		Expect(sum.Records).To(Equal(len(finalizedTasks)))

		wantRaw, err := os.ReadFile(filepath.Join(base, "rollouts.jsonl"))
		Expect(err).NotTo(HaveOccurred())
		want := map[string]map[string]any{}
		for _, row := range jsonLines(wantRaw) {
			delete(row, "_fixture")
			want[string(mustJSON(row["_ng_task_index"]))] = row
		}
		gotRaw, err := os.ReadFile(outPath)
		Expect(err).NotTo(HaveOccurred())
		got := jsonLines(gotRaw)
		Expect(got).To(HaveLen(len(finalizedTasks)))
		masked := 0
		for _, row := range got {
			key := string(mustJSON(row["_ng_task_index"]))
			Expect(diff("row "+key, generic(row), generic(want[key]))).To(BeEmpty())
			id, _, _ := consumer.RolloutID(row)
			jsonl := filepath.Join(tmp, "capture", id+".tokens.jsonl")
			if row["mask_sample"] == true {
				masked++
				Expect(jsonl).To(BeAnExistingFile(), "masked evidence stays")
			} else {
				Expect(jsonl).NotTo(BeAnExistingFile(), "consumed and written: retired")
			}
		}
		Expect(sum.Masked).To(Equal(masked))
		Expect(sum.Retired).To(Equal(len(got) - masked))
	})

	It("checks the whole input first: a bad line stops the run before any record is finalized", func() {
		src := store.NewMemoryStore()
		putAll(context.Background(), src, chainABC()...)
		outPath := filepath.Join(GinkgoT().TempDir(), "out.jsonl")
		w, err := consumer.CreateWriter(outPath)
		Expect(err).NotTo(HaveOccurred())
		in := strings.NewReader("{\"_ng_rollout_id\":\"r-1\"}\n{oops\n")
		sum, err := consumer.FinalizeRollouts(context.Background(), in, w, src, consumer.DefaultOptions(), nil)
		Expect(err).To(MatchError(ContainSubstring("rollouts line 2")))
		Expect(w.Close()).To(Succeed())
		Expect(sum.Records).To(BeZero())
		b, _ := os.ReadFile(outPath)
		Expect(b).To(BeEmpty())
		snap, err := src.Freeze(context.Background(), "r-1")
		Expect(err).NotTo(HaveOccurred(), "r-1 was not retired")
		Expect(snap.Entries).To(HaveLen(3))
	})

	It("refuses a line that holds more than one JSON value instead of dropping the rest", func() {
		src := store.NewMemoryStore()
		outPath := filepath.Join(GinkgoT().TempDir(), "out.jsonl")
		w, err := consumer.CreateWriter(outPath)
		Expect(err).NotTo(HaveOccurred())
		in := strings.NewReader("{\"_ng_rollout_id\":\"x-1\"}{\"_ng_rollout_id\":\"x-2\"}\n")
		sum, err := consumer.FinalizeRollouts(context.Background(), in, w, src, consumer.DefaultOptions(), nil)
		Expect(err).To(MatchError(And(ContainSubstring("rollouts line 1"), ContainSubstring("content follows it at byte 24"))))
		Expect(sum.Records).To(BeZero())
		Expect(w.Close()).To(Succeed())
		b, err := os.ReadFile(outPath)
		Expect(err).NotTo(HaveOccurred())
		Expect(b).To(BeEmpty(), "nothing half-written")

		_, err = consumer.FindRollout(strings.NewReader("{\"_ng_rollout_id\":\"x-1\"} 7\n"), "x-1")
		Expect(err).To(MatchError(ContainSubstring("rollouts line 1")))
	})

	It("aborts when the kill switch trips, after writing the tripping record", func() {
		src := store.NewMemoryStore()
		outPath := filepath.Join(GinkgoT().TempDir(), "out.jsonl")
		w, err := consumer.CreateWriter(outPath)
		Expect(err).NotTo(HaveOccurred())
		in := strings.NewReader("{\"_ng_rollout_id\":\"x-1\"}\n{\"_ng_rollout_id\":\"x-2\"}\n{\"_ng_rollout_id\":\"x-3\"}\n")
		max := 0.5
		sum, err := consumer.FinalizeRollouts(context.Background(), in, w, src, consumer.DefaultOptions(),
			&consumer.KillSwitch{MaxMaskFraction: &max, MinSamples: 2})
		Expect(err).To(MatchError(consumer.ErrMaskFractionExceeded))
		Expect(err.Error()).To(ContainSubstring("capture contains no token records=2"))
		Expect(sum.Records).To(Equal(2))
		Expect(w.Close()).To(Succeed())
	})
})

var _ = Describe("verdicts of a whole directory and explanations", func() {
	ctx := context.Background()

	It("judges every rollout read-only, in rollout-id order, without the response unless asked", func() {
		dir := GinkgoT().TempDir()
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		for _, id := range []string{"r-2", "r-1"} {
			for _, c := range chainABC() {
				e := entry(c)
				e.RolloutID = id
				Expect(fs.Put(ctx, e)).To(Succeed())
			}
		}
		Expect(fs.Close()).To(Succeed())
		ro, err := store.OpenReadOnly(dir)
		Expect(err).NotTo(HaveOccurred())
		vs, err := consumer.JudgeDir(ctx, ro, nil, consumer.DefaultOptions(), false, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(vs).To(HaveLen(2))
		Expect(vs[0].RolloutID).To(Equal("r-1"))
		Expect(vs[1].RolloutID).To(Equal("r-2"))
		Expect(vs[0].MaskSample).To(BeFalse())
		Expect(vs[0].Error).To(BeNil())
		Expect(vs[0].Response).To(BeNil())
		Expect(vs[0].Metrics.Chains).To(Equal(1))
		Expect(vs[0].Reason).To(Equal("one clean chain"))

		withResp, err := consumer.JudgeDir(ctx, ro, []string{"r-2"}, consumer.DefaultOptions(), true, nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(withResp[0].Response["output"]).To(HaveLen(3))

		st, err := fs.State(ctx, "r-1")
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Frozen).To(BeFalse())

		_, err = consumer.JudgeDir(ctx, ro, []string{"r-9"}, consumer.DefaultOptions(), false, nil)
		Expect(err).To(MatchError(store.ErrNoSuchRollout))
	})

	DescribeTable("explains the verdict in plain words",
		func(s scenario, contains []string) {
			r := runScenario(s)
			var out bytes.Buffer
			Expect(consumer.Explain(&out, r)).To(Succeed())
			for _, c := range contains {
				Expect(out.String()).To(ContainSubstring(c))
			}
		},
		Entry("delivered", scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: responseNamed("c")}},
			[]string{"main      a -> b -> c", "response_id", "Not masked: the verified response was attributed to call c"}),
		Entry("unresolved final retry", scenario{snap: snapshotOf(false,
			call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
			call{id: "b1", prompt: pB, gen: gB2, res: V, parent: "a", created: 2},
			call{id: "b2", prompt: pB, gen: gB, res: V, parent: "a", created: 3},
		)}, []string{"unresolved retries: b1, b2", "no_response_object: no verified response was given", "Masked: no witness named the terminal call, and a call was retried"}),
		Entry("broken chain", scenario{snap: snapshotOf(false,
			call{id: "a", prompt: pA, gen: gA, res: R, created: 1},
			call{id: "b", prompt: seq(1, 9), gen: gB, res: U, created: 2},
		), in: consumer.Input{ExplicitCallID: "b"}}, []string{"parent link failures: parent_unresolved=1", "crosses an unproven parent link"}),
		Entry("incomplete", scenario{snap: snapshotOf(true, chainABC()...), in: consumer.Input{Response: responseNamed("c")}},
			[]string{"(incomplete)", "Masked: the snapshot is incomplete"}),
		Entry("failed build", scenario{snap: snapshotOf(false)}, []string{"Masked: no trainable response could be built (capture contains no token records)"}),
		Entry("disagreement", scenario{snap: snapshotOf(false, chainABC()...), in: consumer.Input{Response: responseNamed("c"), ExplicitCallID: "a"}},
			[]string{"witness_disagreement[explicit=a;response_id=c]: witnesses named calls with different tokens", "exactly one clean chain"}),
	)
})
