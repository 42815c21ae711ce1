package proxy_test

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// countingFileStore counts the whole-rollout reads and the tail reads the
// proxy makes.
type countingFileStore struct {
	*store.FileStore
	whole, tails, lines, checks atomic.Int64
	tailEntries                 atomic.Int64
}

func (c *countingFileStore) ReadEntries(ctx context.Context, id string) ([]*record.Entry, error) {
	c.whole.Add(1)
	return c.FileStore.ReadEntries(ctx, id)
}

func (c *countingFileStore) ReadTail(ctx context.Context, id string, from store.Cursor, known store.KnownLine) (store.Tail, error) {
	c.tails.Add(1)
	t, err := c.FileStore.ReadTail(ctx, id, from, known)
	c.tailEntries.Add(int64(len(t.Entries)))
	return t, err
}

func (c *countingFileStore) ReadLine(ctx context.Context, id string, at store.LineRef) (*record.Entry, error) {
	c.lines.Add(1)
	return c.FileStore.ReadLine(ctx, id, at)
}

func (c *countingFileStore) CheckLine(ctx context.Context, id string, at store.LineRef) error {
	c.checks.Add(1)
	return c.FileStore.CheckLine(ctx, id, at)
}

// converseCounted sends one rollout's conversation of calls chat calls,
// each repeating the one before with the reply and a user turn added,
// through a proxy set up by mod in front of a counted file store, and
// returns what it sent.
func converseCounted(ctx SpecContext, rollout, system string, calls int, mod func(*proxy.Options)) (*store.FileStore, *countingFileStore, *proxy.Proxy, []map[string]any) {
	GinkgoHelper()
	fake := startFake()
	fs, err := store.NewFileStore(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { Expect(fs.Close()).To(Succeed()) })
	st := &countingFileStore{FileStore: fs}
	p := startProxy(ctx, fake.URL(), st, mod)
	url := p.URL() + "/ng-rollout/" + rollout + "/training-token-capture/v1/chat/completions"
	msgs := []any{map[string]any{"role": "system", "content": system}, map[string]any{"role": "user", "content": "start"}}
	var sent []map[string]any
	for i := range calls {
		body := map[string]any{"model": "policy", "messages": msgs}
		sent = append(sent, body)
		r := do(ctx, "POST", url, mustJSON(body), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		asst := r.JSON()["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		msgs = append(slices.Clone(msgs), map[string]any{"role": "assistant", "content": asst["content"]},
			map[string]any{"role": "user", "content": "more " + string(rune('a'+i))})
	}
	return fs, st, p, sent
}

var _ = Describe("parent resolution over the file store", func() {
	DescribeTable("reads only the lines each call adds, never the whole rollout again",
		func(ctx SpecContext, system string) {
			const calls = 12
			fs, st, p, sent := converseCounted(ctx, "follow-1", system, calls, func(o *proxy.Options) { o.RequestTokenIDs = true })
			es, err := fs.ReadEntries(ctx, "follow-1")
			Expect(err).NotTo(HaveOccurred())
			Expect(es).To(HaveLen(calls))
			for i, e := range es {
				if i > 0 {
					Expect(*e.ParentResolution).To(Equal(record.ResolutionResolved), "call %d: %s", i, e.ParentResolutionReason)
					Expect(*e.ParentCallID).To(Equal(es[i-1].ModelCallID))
				}
				reqItems, err := lineage.RequestItems(lineage.DialectChat, sent[i])
				Expect(err).NotTo(HaveOccurred())
				Expect(e.ContinuationContextLen).To(Equal(len(reqItems)))
				Expect(lineage.ConversationDigest(reqItems)).To(Equal(e.ContinuationContextDigest), "call %d", i)
			}
			Expect(st.whole.Load()).To(BeZero())
			// Calls 2..n each read the one line the call before added.
			Expect(st.tails.Load()).To(BeEquivalentTo(calls - 1))
			Expect(st.tailEntries.Load()).To(BeEquivalentTo(calls - 1))
			// Each parent is the line the call's own refresh just read: it is
			// checked in the file, not read and parsed again.
			Expect(st.checks.Load()).To(BeNumerically(">=", calls-1))
			Expect(st.lines.Load()).To(BeZero())
			// Nor are they kept once the call is resolved: a proxy tracks
			// thousands of rollouts between their calls. What a follower
			// keeps is the one entry its rollout committed last, handed over
			// so the next call need not parse that line back, and counted.
			Expect(p.HeldEntries()).To(BeZero())
			expectHanded(p, es[len(es)-1], sent[len(sent)-1])
		},
		Entry("small requests, resolved before the engine call", "You are terse."),
		// Above 32 KB the resolution runs while the engine generates.
		Entry("large requests, resolved beside the engine call", strings.Repeat("Follow the repository's conventions. ", 1200)),
	)

	It("with delta records, reads no line back to materialise a parent's tokens", func(ctx SpecContext) {
		const calls = 12
		fs, st, _, _ := converseCounted(ctx, "delta-1", "You are terse.", calls, func(o *proxy.Options) { o.RequestTokenIDs = true; o.DeltaRecords = true })
		es, err := fs.ReadEntries(ctx, "delta-1")
		Expect(err).NotTo(HaveOccurred())
		Expect(es).To(HaveLen(calls))
		for i, e := range es[1:] {
			Expect(*e.ParentResolution).To(Equal(record.ResolutionResolved), "call %d: %s", i+1, e.ParentResolutionReason)
			Expect(*e.ParentCallID).To(Equal(es[i].ModelCallID))
			Expect(e.PromptIsDelta).To(BeTrue(), "call %d", i+1)
		}
		// Without the full prompt handed over, call n walks the chain back
		// to the first call: n-1 lines read and parsed again.
		Expect(st.lines.Load()).To(BeZero())
		Expect(st.whole.Load()).To(BeZero())
	})
})

// handedFor is what the proxy counts for an entry it hands to a follower:
// nothing for a line under 32 KB (parsed back in microseconds), else the
// line's bytes and 8 per token id.
func handedFor(e *record.Entry) int {
	GinkgoHelper()
	line, _, err := store.CanonicalLine(e)
	Expect(err).NotTo(HaveOccurred())
	if len(line) < 32<<10 {
		return 0
	}
	return len(line) + 8*(len(e.PromptTokenIDs)+len(e.GenerationTokenIDs))
}

// expectHanded checks what the proxy counts once e, its rollout's last
// call, was handed over: handedFor(e), and with it the text of e's prompt
// ids the rollout's next call reads its own after, counted as 8 bytes per
// id and the engine reply the text lies in (the text and a few KB more).
// A request body of 32 KB or more also leaves its conversation, counted as
// the body and twice its messages.
func expectHanded(p *proxy.Proxy, e *record.Entry, body map[string]any) {
	GinkgoHelper()
	conversation := 0
	if raw := mustJSON(body); len(raw) >= 32<<10 {
		conversation = len(raw) + 2*len(mustJSON(body["messages"]))
	}
	entry := handedFor(e)
	if entry == 0 {
		Expect(p.HandedBytes()).To(BeEquivalentTo(conversation))
		return
	}
	text := len(mustJSON(e.PromptTokenIDs))
	least := entry + 8*len(e.PromptTokenIDs) + text + conversation
	Expect(p.HandedBytes()).To(BeNumerically(">=", least))
	Expect(p.HandedBytes()).To(BeNumerically("<", least+16<<10))
}

var _ = Describe("the entries handed to the followers", func() {
	chat := func(ctx SpecContext, url string, msgs []any) []any {
		GinkgoHelper()
		r := do(ctx, "POST", url, mustJSON(map[string]any{"model": "policy", "messages": msgs}), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		asst := r.JSON()["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		return append(slices.Clone(msgs), map[string]any{"role": "assistant", "content": asst["content"]}, map[string]any{"role": "user", "content": "more"})
	}
	// A long system turn makes each record's line longer than 32 KB.
	first := []any{map[string]any{"role": "system", "content": strings.Repeat("Follow the repository's conventions. ", 1200)},
		map[string]any{"role": "user", "content": "start"}}

	It("are given back when the rollout is frozen, and within the budget by the least recently used", func(ctx SpecContext) {
		fake := startFake()
		fs, err := store.NewFileStore(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(fs.Close()).To(Succeed()) })
		p := startProxy(ctx, fake.URL(), fs, func(o *proxy.Options) { o.RequestTokenIDs = true })
		url := func(id string) string {
			return p.URL() + "/ng-rollout/" + id + "/training-token-capture/v1/chat/completions"
		}

		msgs := chat(ctx, url("h1"), chat(ctx, url("h1"), first))
		one := p.HandedBytes()
		Expect(one).To(BeNumerically(">", 0))
		Expect(p.HandedRollouts()).To(ConsistOf("h1"))

		By("a budget that holds one rollout's entry: the older rollout gives its entry back")
		p.SetHandedBudget(one + one/2)
		other := chat(ctx, url("h2"), chat(ctx, url("h2"), first))
		Expect(p.HandedBytes()).To(BeNumerically("<=", one+one/2))
		Expect(p.HandedRollouts()).To(ConsistOf("h2"), "the rollout that called last keeps its entry")
		chat(ctx, url("h1"), msgs)
		chat(ctx, url("h2"), other)
		for _, id := range []string{"h1", "h2"} {
			es := entries(ctx, fs, id)
			Expect(*es[len(es)-1].ParentResolution).To(Equal(record.ResolutionResolved), "%s: %s", id, es[len(es)-1].ParentResolutionReason)
		}

		By("the rollouts frozen: their next calls are refused and their entries given back")
		p.SetHandedBudget(64 << 20)
		for _, id := range []string{"h1", "h2"} {
			_, err := fs.Freeze(ctx, id)
			Expect(err).NotTo(HaveOccurred())
			do(ctx, "POST", url(id), mustJSON(map[string]any{"model": "policy", "messages": first}), nil)
		}
		Expect(p.HandedBytes()).To(BeZero())
	})
})
