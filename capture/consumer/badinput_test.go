package consumer_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

func canonicalLine(e *record.Entry) string {
	b, err := e.MarshalCanonical()
	Expect(err).NotTo(HaveOccurred())
	return string(b) + "\n"
}

// writeCapture writes raw JSONL content as rollout r-1's token file.
func writeCapture(lines ...string) (*store.FileStore, string) {
	dir := GinkgoT().TempDir()
	Expect(os.WriteFile(filepath.Join(dir, "r-1.tokens.jsonl"), []byte(strings.Join(lines, "")), 0o644)).To(Succeed())
	fs, err := store.NewFileStore(dir)
	Expect(err).NotTo(HaveOccurred())
	return fs, dir
}

var _ = Describe("bad input", func() {
	ctx := context.Background()
	chain := chainABC()

	DescribeTable("unreadable captures become masked failed builds without a snapshot identity",
		func(lines func() []string, errorContains string) {
			fs, _ := writeCapture(lines()...)
			r, err := consumer.Consume(ctx, fs, "r-1", consumer.Input{}, consumer.DefaultOptions())
			Expect(err).NotTo(HaveOccurred())
			Expect(r.MaskSample).To(BeTrue())
			Expect(r.Error).To(HavePrefix("ValueError: "))
			Expect(r.Error).To(ContainSubstring(errorContains))
			Expect(r.Snapshot).To(BeNil())
			Expect(string(mustJSON(r))).To(MatchJSON(`{"rollout_id":"r-1","builder":"prefix_merging","rebuilt_response":null,
				"mask_sample":true,"error":` + string(mustJSON(r.Error)) + `,"metrics":{"n_calls":0}}`))
		},
		Entry("a corrupt line in the middle of the file", func() []string {
			return []string{canonicalLine(entry(chain[0])), "{not json\n", canonicalLine(entry(chain[1]))}
		}, ""),
		Entry("a record with a newer schema version", func() []string {
			e := entry(chain[0])
			e.SchemaVersion = record.SchemaVersion + 1
			return []string{canonicalLine(e), canonicalLine(entry(chain[1]))}
		}, "schema"),
		Entry("a record whose log-probs do not match its tokens", func() []string {
			e := entry(chain[0])
			e.GenerationLogProbs = e.GenerationLogProbs[:1]
			return []string{canonicalLine(e), canonicalLine(entry(chain[1]))}
		}, "generation_log_probs"),
	)

	It("turns a log-prob/token mismatch from a transport into Gym's validation error", func() {
		snap := snapshotOf(false, chain...)
		snap.Entries[1].GenerationLogProbs = []float64{-1}
		r := consumer.ConsumeSnapshot(snap, consumer.Input{}, consumer.DefaultOptions())
		Expect(r.MaskSample).To(BeTrue())
		Expect(r.Error).To(Equal("ValueError: log-prob/token length mismatch on b: 1 vs 3"))
		Expect(r.Metrics.TerminalAttribution.Chain).To(Equal("error"))
		Expect(r.Snapshot).NotTo(BeNil(), "evidence keeps its snapshot identity")
	})

	DescribeTable("builder names",
		func(name, wantErr string) {
			opts := consumer.DefaultOptions()
			opts.Builder = name
			r := consumer.ConsumeSnapshot(snapshotOf(false, chain...), consumer.Input{}, opts)
			Expect(r.MaskSample).To(BeTrue())
			Expect(r.Error).To(Equal(wantErr))
			Expect(r.Builder).To(Equal(name))
			Expect(string(mustJSON(r.Metrics))).To(MatchJSON(
				`{"n_calls":3,"terminal_attribution":{"method":"none","call_id":null,"reason":"no_response_object","chain":"error"}}`))
		},
		Entry("an unknown builder", "magic", "ValueError: unknown builder 'magic'; known: ['prefix_merging']"),
		Entry("per_request, with the explicit message (§6.6)", "per_request", consumer.ErrTextPerRequest),
	)

	It("treats an invalid rollout id as a failed freeze", func() {
		fs, err := store.NewFileStore(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		r, err := consumer.Consume(ctx, fs, "a/b", consumer.Input{}, consumer.DefaultOptions())
		Expect(err).NotTo(HaveOccurred())
		Expect(r.MaskSample).To(BeTrue())
		Expect(r.Error).To(HavePrefix("ValueError: "))
	})

	It("reports a freeze that returns an unknown error with a generic type", func() {
		r, err := consumer.Consume(ctx, failingSource{err: os.ErrPermission}, "r-1", consumer.Input{}, consumer.DefaultOptions())
		Expect(err).NotTo(HaveOccurred())
		Expect(r.MaskSample).To(BeTrue())
		Expect(r.Error).To(Equal("Error: permission denied"))
	})

	It("returns a Go error only for a nil source or a cancelled context", func() {
		_, err := consumer.Consume(ctx, nil, "r-1", consumer.Input{}, consumer.DefaultOptions())
		Expect(err).To(MatchError(consumer.ErrNilSource))
		cancelled, cancel := context.WithCancel(ctx)
		cancel()
		_, err = consumer.Consume(cancelled, store.NewMemoryStore(), "r-1", consumer.Input{}, consumer.DefaultOptions())
		Expect(err).To(MatchError(context.Canceled))
	})

	It("survives nil entries and records without output items", func() {
		snap := snapshotOf(false, chain...)
		snap.Entries = append(snap.Entries, nil)
		snap.Entries[0].OutputItems = nil
		r := consumer.ConsumeSnapshot(snap, consumer.Input{Response: map[string]any{"output": []any{"x", 3}}}, consumer.DefaultOptions())
		Expect(r.Error).To(BeEmpty())
		Expect(r.Metrics.NCalls).To(Equal(4))
		Expect(r.Metrics.TerminalAttribution.Reason).To(Equal("response_has_no_id,no_model_authored_output"), "non-object items are ignored")
	})
})
