package chaos_test

import (
	"fmt"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/harness/chaos"
)

func ptr[T any](v T) *T { return &v }

// entry is a valid root record with the given reply id and generation.
func entry(rollout string, n int, responseID string, gen ...int) *record.Entry {
	prompt := []int{151644, 872, 198, 9707 + n, 151645}
	cum := append(append([]int{}, prompt...), gen...)
	digest, err := record.TokenDigest(cum)
	Expect(err).NotTo(HaveOccurred())
	lps := make([]float64, len(gen))
	return &record.Entry{
		SchemaVersion: record.SchemaVersion, RolloutID: rollout, ModelCallID: fmt.Sprintf("%032x", n),
		Model: "m", PromptTokenIDs: prompt, GenerationTokenIDs: gen, GenerationLogProbs: lps,
		OutputItems:    []record.Item{{"type": "message", "role": "assistant", "content": "x"}},
		TokenItemIndex: ptr(0), CreatedAt: 1795943062.25, CumLen: ptr(len(cum)), Digest: ptr(digest),
		ParentResolution: ptr(record.ResolutionRoot), ResponseID: ptr(responseID),
	}
}

var _ = Describe("the chaos counts", func() {
	It("tell stored, lost, masked and corrupt calls apart", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		var ledger []vllm.LedgerEntry
		put := func(e *record.Entry, inLedger bool) {
			Expect(fs.BeginCall(ctx, e.RolloutID, e.ModelCallID)).To(Succeed())
			Expect(fs.Put(ctx, e)).To(Succeed())
			if inLedger {
				ledger = append(ledger, vllm.LedgerEntry{PromptTokenIDs: e.PromptTokenIDs, GeneratedTokenIDs: e.GenerationTokenIDs})
			}
		}
		put(entry("a", 1, "r1", 5, 6), true) // stored
		put(entry("a", 2, "r2", 5, 7), true) // r2 twice: a duplicate
		put(entry("a", 3, "r2", 5, 8), true) //
		// r3 acknowledged, never stored, rollout a not masked: lost
		put(entry("b", 4, "r4", 5, 9), true)                                  // stored, and b is masked:
		Expect(fs.BeginCall(ctx, "b", fmt.Sprintf("%032x", 5))).To(Succeed()) // a call begun, never finished
		put(entry("c", 6, "r6", 1, 2), false)                                 // tokens the engine never generated: corrupt
		Expect(fs.Close()).To(Succeed())

		row, err := chaos.TallyAcks(ctx, dir, 9, map[string][]string{
			"a": {"r1", "r2", "r3"}, "b": {"r4", "r5"}, "c": {"r6"},
		}, ledger)
		Expect(err).NotTo(HaveOccurred())
		Expect(row).To(MatchFields(row, 9, 6, 3, 1, 2, 2))
	})
})

// MatchFields checks tried, acknowledged, stored, lost, corrupt and masked.
func MatchFields(_ chaos.Row, tried, acked, stored, lost, corrupt, masked int) OmegaMatcher {
	return And(
		WithTransform(func(r chaos.Row) int { return r.Tried }, Equal(tried)),
		WithTransform(func(r chaos.Row) int { return r.Acknowledged }, Equal(acked)),
		WithTransform(func(r chaos.Row) int { return r.Stored }, Equal(stored)),
		WithTransform(func(r chaos.Row) int { return r.Lost }, Equal(lost)),
		WithTransform(func(r chaos.Row) int { return r.Corrupt }, Equal(corrupt)),
		WithTransform(func(r chaos.Row) int { return r.Masked }, Equal(masked)),
	)
}
