package natsstore_test

import (
	"context"
	"fmt"
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/conformance"
	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/capture/store/natsstore"
	"github.com/capbench/capbench/internal/natstest"
)

// embedded is the suite's in-process server (one per Ginkgo process).
var embedded *natstest.Server

var _ = BeforeSuite(func() {
	dir, err := os.MkdirTemp("", "natsstore-js-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	embedded, err = natstest.Start(dir)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(embedded.Stop)
})

// The servers some specs start on first use stop with the suite.
var _ = AfterSuite(func() {
	stopProcess()
	stopCluster()
})

// open connects a fresh client to url with opts' names filled in.
func open(ctx context.Context, url string) *natsstore.Store {
	o, err := natsstore.ParseURL(url)
	Expect(err).NotTo(HaveOccurred())
	s, err := natsstore.Open(ctx, o)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(s.Close)
	return s
}

// factories builds fresh clients over one server, the way separate proxy and
// consumer processes would connect.
func factories(url func() string) conformance.Factories {
	dial := func() *natsstore.Store {
		o, err := natsstore.ParseURL(url())
		if err != nil {
			panic(err)
		}
		s, err := natsstore.Open(context.Background(), o)
		if err != nil {
			panic(err) // surfaces as the check's failure
		}
		return s
	}
	return conformance.Factories{
		NewSink:     func() store.Sink { return dial() },
		NewSource:   func() store.Source { return dial() },
		NewResolver: func() conformance.Resolver { return conformance.NewReaderResolver(dial()) },
	}
}

// entry is the conformance kit's realistic record with tokens of the given
// sizes: prompt ids, then as many generated ids with log-probs.
func entry(rolloutID, callID string, prompt, gen int) *record.Entry {
	e, err := conformance.Entry(rolloutID, callID, 0)
	Expect(err).NotTo(HaveOccurred())
	if prompt == 0 && gen == 0 {
		return e
	}
	e.PromptTokenIDs = make([]int, prompt)
	for i := range e.PromptTokenIDs {
		e.PromptTokenIDs[i] = 100000 + i%50000
	}
	e.GenerationTokenIDs = make([]int, gen)
	e.GenerationLogProbs = make([]float64, gen)
	for i := range e.GenerationTokenIDs {
		e.GenerationTokenIDs[i] = 100000 + (i*7)%50000
		e.GenerationLogProbs[i] = -1.0 / float64(i+3)
	}
	e.CumLen, e.Digest = nil, nil
	Expect(lineage.Stamp(e, []any{map[string]any{"role": "user", "content": "What is the weather in Paris?"}},
		lineage.Decision{Resolution: record.ResolutionRoot})).To(Succeed())
	return e
}

func rolloutName(base string) string {
	return fmt.Sprintf("%s-%d", base, GinkgoParallelProcess())
}
