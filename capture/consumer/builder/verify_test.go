package builder_test

import (
	"reflect"
	"runtime"
	"slices"
	"strconv"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer/builder"
	"github.com/capbench/capbench/capture/record"
)

// bigChain builds a chain of n calls whose prompts grow by step tokens, large
// enough that parent links are verified on several goroutines, with a
// branch at call 2 and three kinds of broken link: a wrong stamped digest on
// call 4, a wrong stamped length on call 7 and a child of call 9 whose
// prompt differs inside the parent's tokens.
func bigChain(n, step int) []*record.Entry {
	var entries []*record.Entry
	prompt := make([]int, step)
	for i := range prompt {
		prompt[i] = i
	}
	parent := ""
	var cum2 []int
	for i := 0; i < n; i++ {
		gen := []int{1_000_000 + i, 2_000_000 + i}
		id := "c" + strconv.Itoa(100+i)
		r := rec{id: id, prompt: prompt, gen: gen, res: record.ResolutionRoot}
		if parent != "" {
			r.res, r.parent = record.ResolutionResolved, parent
		}
		e := mk(r)
		switch i {
		case 4:
			d, err := record.TokenDigest([]int{1, 2, 3})
			Expect(err).NotTo(HaveOccurred())
			e.Digest = &d
		case 7:
			l := *e.CumLen - 1
			e.CumLen = &l
		case 10:
			e.PromptTokenIDs = append([]int{}, prompt...)
			e.PromptTokenIDs[step/2]++
		}
		entries = append(entries, e)
		cum := append(append([]int{}, prompt...), gen...)
		if i == 2 {
			cum2 = cum
		}
		prompt = append(cum, make([]int, step)...)
		for j := len(cum); j < len(prompt); j++ {
			prompt[j] = 3_000_000 + i*step + j
		}
		parent = id
	}
	branch := mk(rec{id: "b2", prompt: append(append([]int{}, cum2...), 42), gen: []int{43},
		res: record.ResolutionResolved, parent: "c102"})
	return append(entries, branch)
}

func buildWithProcs(procs int, entries []*record.Entry, terminal string) *builder.Output {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	out, err := builder.PrefixMergingBuild(entries, terminal)
	Expect(err).NotTo(HaveOccurred())
	return out
}

var _ = Describe("parent links verified ahead of placement", func() {
	It("gives the same build on one goroutine and on several, broken links included", func() {
		entries := bigChain(14, 6000)
		serial := buildWithProcs(1, entries, "c113")
		parallel := buildWithProcs(4, entries, "c113")
		Expect(parallel).To(Equal(serial))

		Expect(serial.Notes.ParentLinkFailures).To(Equal(map[string]int{builder.ReasonDigestMismatch: 3}))
		Expect(serial.Notes.UnresolvedParentCalls).To(ConsistOf("c105", "c108", "c110"))
		Expect(serial.Notes.Roots).To(Equal(4))
		Expect(serial.Notes.TerminalChain).To(Equal(builder.TerminalBroken))
		Expect(serial.Notes.Chains).To(Equal(len(serial.Chains)))
	})

	It("gives the same build when a reader worked the stamped digests out ahead", func() {
		entries := bigChain(14, 6000)
		fresh := make([]*record.Entry, len(entries))
		for i, e := range entries {
			fresh[i] = e.Clone()
		}
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
		var precheck record.DigestPrecheck
		for _, e := range entries {
			precheck.Add(e)
		}
		precheck.Wait()
		ok, known := entries[4].StampedDigestMatches()
		Expect(known).To(BeTrue(), "call 4 is a parent, so the precheck works it out")
		Expect(ok).To(BeFalse(), "call 4's stamped digest is wrong")

		// The entries differ only in what the precheck memoised.
		Expect(buildWithProcs(4, entries, "c113")).To(BeComparableTo(buildWithProcs(1, fresh, "c113"),
			cmp.Exporter(func(reflect.Type) bool { return true }), cmpopts.IgnoreFields(record.Entry{}, "stamped"),
			cmp.Comparer(slices.Equal[[]int])))
	})

	It("links every call of a clean chain and delivers it", func() {
		// Call 4's own digest is wrong, but nothing links to it.
		entries := bigChain(6, 40000)[:5]
		out := buildWithProcs(4, entries, "c104")
		Expect(out.Notes.ParentLinkFailures).To(BeEmpty())
		Expect(out.Notes.TerminalChain).To(Equal(builder.TerminalDelivered))
		Expect(out.Main().Links).To(HaveLen(5))
	})
})
