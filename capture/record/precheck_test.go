package record_test

import (
	"runtime"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

// precheckChain is n linked calls, each prompt the whole of the call before
// plus step new tokens, every digest stamped from the call's own tokens.
func precheckChain(n, step int) []*record.Entry {
	var entries []*record.Entry
	var cum []int
	for i := range n {
		prompt := append(append([]int{}, cum...), make([]int, step)...)
		for j := len(cum); j < len(prompt); j++ {
			prompt[j] = i*step + j
		}
		gen := []int{1_000_000 + i}
		cum = append(append([]int{}, prompt...), gen...)
		d, err := record.TokenDigest(cum)
		Expect(err).NotTo(HaveOccurred())
		e := &record.Entry{ModelCallID: "c" + strconv.Itoa(i), PromptTokenIDs: prompt, GenerationTokenIDs: gen, Digest: &d}
		if i > 0 {
			parent := "c" + strconv.Itoa(i-1)
			e.ParentCallID = &parent
		}
		entries = append(entries, e)
	}
	return entries
}

func runPrecheck(procs int, entries []*record.Entry) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	var p record.DigestPrecheck
	for _, e := range entries {
		p.Add(e)
	}
	p.Wait()
}

func known(e *record.Entry) bool {
	_, k := e.StampedDigestMatches()
	return k
}

var _ = Describe("DigestPrecheck", func() {
	It("works out every parent of a large chain, and no call nothing names as parent", func() {
		entries := precheckChain(12, 8000)
		bad := "00" + (*entries[5].Digest)[2:]
		entries[5].Digest = &bad
		runPrecheck(2, entries)
		for i, e := range entries[:11] {
			ok, k := e.StampedDigestMatches()
			Expect(k).To(BeTrue(), "call %d", i)
			Expect(ok).To(Equal(i != 5), "call %d", i)
		}
		Expect(known(entries[11])).To(BeFalse(), "the last call is nobody's parent")
	})

	DescribeTable("leaves the digests to the builder",
		func(procs int, entries []*record.Entry) {
			runPrecheck(procs, entries)
			for i, e := range entries {
				Expect(known(e)).To(BeFalse(), "call %d", i)
			}
		},
		Entry("for a small rollout", 2, precheckChain(12, 100)),
		Entry("on one core", 1, precheckChain(12, 8000)),
		Entry("for calls nothing names as parent", 2, func() []*record.Entry {
			entries := precheckChain(12, 8000)
			for _, e := range entries {
				e.ParentCallID = nil
			}
			return entries
		}()),
		Entry("for delta records, whose tokens start in an earlier record", 2, func() []*record.Entry {
			entries := precheckChain(12, 8000)
			for _, e := range entries {
				e.PromptIsDelta = true
			}
			return entries
		}()),
	)

	DescribeTable("forgets what it worked out once the entry changes",
		func(change func(*record.Entry) *record.Entry) {
			entries := precheckChain(12, 8000)
			runPrecheck(2, entries)
			Expect(known(entries[3])).To(BeTrue())
			Expect(known(change(entries[3]))).To(BeFalse())
		},
		Entry("a new prompt", func(e *record.Entry) *record.Entry {
			e.PromptTokenIDs = append([]int{}, e.PromptTokenIDs...)
			return e
		}),
		Entry("a shorter generation", func(e *record.Entry) *record.Entry {
			e.GenerationTokenIDs = e.GenerationTokenIDs[:0]
			return e
		}),
		Entry("a new digest", func(e *record.Entry) *record.Entry {
			d := "ab" + (*e.Digest)[2:]
			e.Digest = &d
			return e
		}),
		Entry("no digest", func(e *record.Entry) *record.Entry {
			e.Digest = nil
			return e
		}),
		Entry("a clone", (*record.Entry).Clone),
	)
})
