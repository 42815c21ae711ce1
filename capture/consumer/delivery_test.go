package consumer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
)

func putAll(ctx context.Context, s store.Sink, calls ...call) {
	for _, c := range calls {
		Expect(s.Put(ctx, entry(c))).To(Succeed())
	}
}

var _ = Describe("delivery", func() {
	ctx := context.Background()

	It("replaces only response.output, attaches the metrics and leaves a healthy record unmasked", func() {
		src := store.NewMemoryStore()
		putAll(ctx, src, chainABC()...)
		rec := consumer.Rollout{
			"_ng_task_index": json.Number("1"), "_ng_rollout_index": json.Number("0"), "_ng_rollout_id": "r-1",
			"reward": json.Number("1.0"),
			"response": map[string]any{"id": "resp-c", "model": "pol", "usage": "kept",
				"output": []any{map[string]any{"role": "assistant", "content": "transcript"}}},
		}
		r := consumer.Finalize(ctx, rec, src, consumer.DefaultOptions())
		Expect(r.MaskSample).To(BeFalse())
		Expect(rec).NotTo(HaveKey("mask_sample"))
		resp := rec["response"].(map[string]any)
		Expect(resp["id"]).To(Equal("resp-c"))
		Expect(resp["usage"]).To(Equal("kept"))
		Expect(resp["output"]).To(Equal(r.RebuiltResponse["output"]))
		Expect(rec["reward"]).To(Equal(json.Number("1.0")))
		tc := rec["_ng_token_capture"].(consumer.Metrics)
		Expect(tc.TerminalAttribution.Method).To(Equal("response_id"))
		Expect(tc.Error).To(BeEmpty())
		line, err := consumer.EncodeRollout(rec)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(line)).To(ContainSubstring(`"delivered_fraction":1.0`))
		Expect(string(line)).To(ContainSubstring(`"reward":1.0`))
	})

	It("sets the whole projection as the response when the record has no response object", func() {
		src := store.NewMemoryStore()
		putAll(ctx, src, chainABC()...)
		rec := consumer.Rollout{"_ng_rollout_id": "r-1"}
		r := consumer.Finalize(ctx, rec, src, consumer.DefaultOptions())
		Expect(r.Error).To(BeEmpty())
		Expect(rec["response"]).To(Equal(r.RebuiltResponse))
	})

	It("derives the capture key from indices and the attempt", func() {
		for _, tc := range []struct {
			rec  consumer.Rollout
			want string
		}{
			{consumer.Rollout{"_ng_task_index": json.Number("3"), "_ng_rollout_index": json.Number("1")}, "3-1"},
			{consumer.Rollout{"_ng_task_index": 3.0, "_ng_rollout_index": 1.0, "_ng_attempt_index": 2.0}, "3-1-a2"},
			{consumer.Rollout{"_ng_rollout_id": "step4.3-1", "_ng_attempt_index": json.Number("0")}, "step4.3-1"},
		} {
			id, present, err := consumer.RolloutID(tc.rec)
			Expect(err).NotTo(HaveOccurred())
			Expect(present).To(BeTrue())
			Expect(id).To(Equal(tc.want))
		}
		_, present, err := consumer.RolloutID(consumer.Rollout{})
		Expect(err).NotTo(HaveOccurred())
		Expect(present).To(BeFalse())
	})

	It("sends its masked-rollout warning to the logger in the options", func() {
		src := store.NewMemoryStore()
		Expect(src.MarkIncomplete(ctx, "r-9", "lost")).To(Succeed())
		var logs bytes.Buffer
		opts := consumer.DefaultOptions()
		opts.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		r := consumer.Finalize(ctx, consumer.Rollout{"_ng_rollout_id": "r-9"}, src, opts)
		Expect(r.MaskSample).To(BeTrue())
		Expect(logs.String()).To(ContainSubstring("rollout masked"))
		Expect(logs.String()).To(ContainSubstring("rollout_id=r-9"))
	})

	It("returns nil without a source", func() {
		Expect(consumer.Finalize(ctx, consumer.Rollout{"_ng_rollout_id": "r-1"}, nil, consumer.DefaultOptions())).To(BeNil())
	})

	Describe("retirement", func() {
		It("retires a consumed snapshot and keeps masked evidence", func() {
			dir := GinkgoT().TempDir()
			fs, err := store.NewFileStore(dir)
			Expect(err).NotTo(HaveOccurred())
			good := chainABC()
			for i := range good {
				good[i].id = "g" + good[i].id
				if good[i].parent != "" {
					good[i].parent = "g" + good[i].parent
				}
			}
			healthy := consumer.Rollout{"_ng_rollout_id": "r-1"}
			putAll(ctx, fs, good...) // entries carry rollout id r-1
			r := consumer.Finalize(ctx, healthy, fs, consumer.DefaultOptions())
			Expect(consumer.CanRetire(r)).To(BeTrue())
			Expect(consumer.Retire(ctx, "r-1", fs, r)).To(BeTrue())
			Expect(filepath.Join(dir, "r-1.tokens.jsonl")).NotTo(BeAnExistingFile())

			masked := &consumer.Result{MaskSample: true, Snapshot: r.Snapshot, RebuiltResponse: map[string]any{}}
			Expect(consumer.CanRetire(masked)).To(BeFalse())
			Expect(consumer.Retire(ctx, "r-1", fs, masked)).To(BeFalse())
		})

		It("does not retire a stale snapshot or a build without snapshot identity", func() {
			src := store.NewMemoryStore()
			putAll(ctx, src, chainABC()...)
			r := consumer.Finalize(ctx, consumer.Rollout{"_ng_rollout_id": "r-1"}, src, consumer.DefaultOptions())
			Expect(consumer.CanRetire(r)).To(BeTrue())
			Expect(src.MarkIncomplete(ctx, "r-1", "late")).To(Succeed()) // bumps the version
			Expect(consumer.Retire(ctx, "r-1", src, r)).To(BeFalse())
			noSnap := *r
			noSnap.Snapshot = nil
			Expect(consumer.Retire(ctx, "r-1", src, &noSnap)).To(BeFalse())
			Expect(consumer.Retire(ctx, "r-1", nil, r)).To(BeFalse())
		})
	})

	Describe("the rollouts writer", func() {
		It("appends whole lines durably and refuses appends after close", func() {
			path := filepath.Join(GinkgoT().TempDir(), "out.jsonl")
			w, err := consumer.CreateWriter(path)
			Expect(err).NotTo(HaveOccurred())
			Expect(w.Append(consumer.Rollout{"a": 1, "b": "<x>"})).To(Succeed())
			Expect(w.Append(consumer.Rollout{"a": 2})).To(Succeed())
			Expect(w.Close()).To(Succeed())
			Expect(w.Close()).To(Succeed())
			Expect(w.Append(consumer.Rollout{"a": 3})).To(MatchError(consumer.ErrWriterClosed))
			b, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(b)).To(Equal("{\"a\":1,\"b\":\"<x>\"}\n{\"a\":2}\n"))
		})

		It("refuses every later append once a failed append could not be cut back", func() {
			w, err := consumer.CreateWriter(filepath.Join(GinkgoT().TempDir(), "out.jsonl"))
			Expect(err).NotTo(HaveOccurred())
			Expect(w.Append(consumer.Rollout{"a": 1})).To(Succeed())
			Expect(consumer.CloseFileUnderneath(w)).To(Succeed())
			Expect(w.Append(consumer.Rollout{"b": 2})).To(MatchError(ContainSubstring("append")))
			err = w.Append(consumer.Rollout{"c": 3})
			Expect(err).To(MatchError(ContainSubstring("unusable since an append could not be cut back")))
		})

		It("writes nothing for a record that cannot be encoded", func() {
			path := filepath.Join(GinkgoT().TempDir(), "out.jsonl")
			w, err := consumer.CreateWriter(path)
			Expect(err).NotTo(HaveOccurred())
			defer w.Close()
			Expect(w.Append(consumer.Rollout{"ok": true})).To(Succeed())
			Expect(w.Append(consumer.Rollout{"bad": math.NaN()})).NotTo(Succeed())
			Expect(w.Append(consumer.Rollout{"ok": false})).To(Succeed())
			f, err := os.Open(path)
			Expect(err).NotTo(HaveOccurred())
			defer f.Close()
			var lines []string
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				lines = append(lines, sc.Text())
			}
			Expect(lines).To(Equal([]string{`{"ok":true}`, `{"ok":false}`}))
		})

		It("reports a directory that does not exist", func() {
			_, err := consumer.CreateWriter(filepath.Join(GinkgoT().TempDir(), "missing", "out.jsonl"))
			Expect(err).To(HaveOccurred())
		})
	})
})

var _ = Describe("the kill switch", func() {
	masked := &consumer.Result{MaskSample: true, Metrics: consumer.Metrics{CaptureIncomplete: true}}
	failed := &consumer.Result{MaskSample: true, Error: "capture contains no token records"}
	healthy := &consumer.Result{}

	DescribeTable("trips only above max_mask_fraction after enough samples",
		func(max *float64, minSamples int, results []*consumer.Result, tripAt int, reasons string) {
			k := &consumer.KillSwitch{MaxMaskFraction: max, MinSamples: minSamples}
			tripped := -1
			var tripErr error
			for i, r := range results {
				if err := k.Observe(r); err != nil && tripped < 0 {
					tripped, tripErr = i, err
				}
			}
			Expect(tripped).To(Equal(tripAt))
			if tripAt >= 0 {
				Expect(tripErr).To(MatchError(consumer.ErrMaskFractionExceeded))
				Expect(tripErr.Error()).To(ContainSubstring(reasons))
			}
		},
		Entry("disabled", nil, 1, []*consumer.Result{masked, masked}, -1, ""),
		Entry("below the minimum sample count", ptr(0.1), 3, []*consumer.Result{masked, masked}, -1, ""),
		Entry("trips at the minimum", ptr(0.5), 3, []*consumer.Result{masked, healthy, failed}, 2,
			"capture contains no token records=1, capture_incomplete=1"),
		Entry("equal to the maximum does not trip", ptr(0.5), 2, []*consumer.Result{masked, healthy}, -1, ""),
		Entry("nil results are not finalized", ptr(0.4), 2, []*consumer.Result{nil, masked, nil, healthy, masked}, 3, "capture_incomplete=1"),
	)
})

func ptr(f float64) *float64 { return &f }

var _ = DescribeTable("metrics survive a JSON round trip in both shapes",
	func(m consumer.Metrics) {
		b := mustJSON(m)
		var back consumer.Metrics
		Expect(json.Unmarshal(b, &back)).To(Succeed())
		Expect(back).To(Equal(m))
		Expect(mustJSON(back)).To(MatchJSON(b))
	},
	Entry("success", consumer.Metrics{NCalls: 3, Chains: 1, Roots: 1, DeliveredFraction: 1, ParentLinkFailures: map[string]int{"parent_unresolved": 1},
		TerminalAttribution: &consumer.Attribution{Method: "none", Reason: "x"}}),
	Entry("failed", consumer.Metrics{Failed: true, NCalls: 2, CaptureIncomplete: true, Error: "capture contains no token records"}),
)

var _ = DescribeTable("rollout lines write floats as Python's json.dumps does",
	func(v any, want string) {
		line, err := consumer.EncodeRollout(consumer.Rollout{"v": v})
		Expect(err).NotTo(HaveOccurred())
		Expect(string(line)).To(Equal(`{"v":` + want + `}`))
	},
	Entry("integral", 1.0, "1.0"),
	Entry("zero", 0.0, "0.0"),
	Entry("small log-prob", -3.2186455882765586e-05, "-3.2186455882765586e-05"),
	Entry("ordinary log-prob", -0.0019270817283540964, "-0.0019270817283540964"),
	Entry("large", 1e16, "1e+16"),
	Entry("slice", []float64{-1e-7, 2.5}, "[-1e-07,2.5]"),
	Entry("nested", []any{map[string]any{"x": 3.0}}, `[{"x":3.0}]`),
	Entry("exact numbers stay as read", json.Number("1.0"), "1.0"),
)
