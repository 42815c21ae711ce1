package store_test

import (
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"

	"github.com/capbench/capbench/internal/fixtures"
)

// testStore is what both stores offer; the specs run against each.
type testStore interface {
	store.Sink
	store.Source
	store.Reader
	Delete(ctx context.Context, rolloutID string) error
	SweepRetired(ctx context.Context, olderThan time.Duration) (int, error)
	IsIncomplete(ctx context.Context, rolloutID string) (bool, error)
	State(ctx context.Context, rolloutID string) (store.State, error)
	Rollouts(ctx context.Context) ([]string, error)
}

// fixturesDir is a folder of the shared fixtures next to the repository.
func fixturesDir(sub string) (string, bool) {
	dir, ok := fixtures.Dir()
	if !ok {
		return "", false
	}
	p := filepath.Join(dir, sub)
	fi, err := os.Stat(p)
	return p, err == nil && fi.IsDir()
}

func ptr[T any](v T) *T { return &v }

// beforeEachFileStore registers a BeforeEach that opens a file store over
// a fresh temporary directory for each spec of the container, setting ctx,
// dir and fs. BeforeEach nodes the container registers after it run after
// it, with the store open.
func beforeEachFileStore(ctx *context.Context, dir *string, fs **store.FileStore) {
	BeforeEach(func() {
		*ctx = context.Background()
		*dir = GinkgoT().TempDir()
		var err error
		*fs, err = store.NewFileStore(*dir)
		Expect(err).NotTo(HaveOccurred())
		s := *fs
		DeferCleanup(func() { Expect(s.Close()).To(Succeed(), "closing the spec's store") })
	})
}

// newEntry builds a valid schema-5 root record. gen varies the payload so a
// re-put with other tokens is a conflict.
func newEntry(rolloutID, callID string, gen ...int) *record.Entry {
	if len(gen) == 0 {
		gen = []int{7, 8, 9}
	}
	lps := make([]float64, len(gen))
	for i := range lps {
		lps[i] = -0.25 * float64(i+1)
	}
	prompt := []int{151644, 872, 198, 9707, 151645}
	cum := append(append([]int{}, prompt...), gen...)
	digest, err := record.TokenDigest(cum)
	if err != nil {
		panic(err)
	}
	return &record.Entry{
		SchemaVersion:      record.SchemaVersion,
		RolloutID:          rolloutID,
		ModelCallID:        callID,
		Model:              "test-model",
		PromptTokenIDs:     prompt,
		GenerationTokenIDs: gen,
		GenerationLogProbs: lps,
		OutputItems: []record.Item{{
			"type": "message", "role": "assistant", "content": "héllo \u2028 \"quoted\"",
		}},
		TokenItemIndex:   ptr(0),
		CreatedAt:        1795943062.25,
		CumLen:           ptr(len(cum)),
		Digest:           ptr(digest),
		ParentResolution: ptr(record.ResolutionRoot),
	}
}
