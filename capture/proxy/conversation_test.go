package proxy_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("a rollout's conversation carried to its next request", func() {
	DescribeTable("decodes only what follows the previous list, and the same as a whole decode",
		func(prev, list string, reused bool) {
			got, ok := proxy.ListAfter([]byte(prev), []byte(list))
			Expect(ok).To(Equal(reused))
			if ok {
				want, err := proxy.DecodeJSON([]byte(list))
				Expect(err).NotTo(HaveOccurred())
				Expect(got).To(Equal(want))
			}
		},
		Entry("one element more", `[{"a":1}]`, `[{"a":1},{"b":2}]`, true),
		Entry("the same list", `[{"a":1},{"b":2}]`, `[{"a":1},{"b":2}]`, true),
		Entry("space before the comma and the bracket", `[{"a":1} ]`, `[{"a":1} , {"b":2} ]`, true),
		Entry("a null among the new elements", `[{"a":1}]`, `[{"a":1},null,{"b":2}]`, true),
		Entry("an earlier element changed", `[{"a":1},{"b":2}]`, `[{"a":9},{"b":2},{"c":3}]`, false),
		Entry("a last shared number that goes on", `[1,2]`, `[1,23,4]`, false),
		Entry("a last shared number that goes on to the end", `[1,2]`, `[1,23]`, false),
		Entry("a last shared string that goes on", `["ab"]`, `["abc"]`, false),
		Entry("fewer elements", `[{"a":1},{"b":2}]`, `[{"a":1}]`, false),
		Entry("an empty previous list", `[]`, `[{"a":1}]`, false),
	)

	// The request's list is checked only after the bytes it shares with the
	// previous one: what follows them must still be checked in full.
	DescribeTable("checks a request's list after the previous one's bytes as a whole scan does",
		func(prev, body string) {
			got, ok := proxy.DecodeRequestAfter([]byte(body), []byte(prev))
			Expect(ok).To(Equal(json.Valid([]byte(body))), body)
			if ok {
				want, err := proxy.DecodeJSON([]byte(body))
				Expect(err).NotTo(HaveOccurred())
				Expect(got).To(Equal(want))
			}
		},
		Entry("one element more", `[{"a":1}]`, `{"model":"m","messages":[{"a":1},{"b":2}],"n":1}`),
		Entry("the same list", `[{"a":1}]`, `{"messages":[{"a":1}]}`),
		Entry("a bad element after the shared ones", `[{"a":1}]`, `{"messages":[{"a":1},{"b":}]}`),
		Entry("a trailing comma", `[{"a":1}]`, `{"messages":[{"a":1},]}`),
		Entry("a shared number that goes on", `[1,2]`, `{"messages":[1,23]}`),
		Entry("a list left open", `[{"a":1}]`, `{"messages":[{"a":1},{"b":2}}`),
		Entry("an earlier element changed", `[{"a":1}]`, `{"messages":[{"a":2},{"b":2}]}`),
		Entry("bad bytes after the list", `[{"a":1}]`, `{"messages":[{"a":1},{"b":2}] x}`),
	)

	// A Messages request is translated to chat after the previous request's
	// translation: the engine must get the bytes a whole translation sends.
	DescribeTable("sends the engine the chat body a whole translation sends, translating only the new messages",
		func(prev, next string, reused bool) {
			after, alone, wasReused, err := proxy.MessagesToChatAfter([]byte(prev), []byte(next))
			Expect(err).NotTo(HaveOccurred())
			Expect(string(after)).To(Equal(string(alone)))
			Expect(wasReused).To(Equal(reused))
			var body map[string]any
			Expect(json.Unmarshal(after, &body)).To(Succeed())
			Expect(body["messages"]).NotTo(BeEmpty())
		},
		Entry("a user turn more", `{"model":"m","system":"be brief","messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","system":"be brief","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yes"},{"role":"user","content":"go on"}]}`, true),
		Entry("a tool call whose input keys are not sorted, then its result",
			`{"model":"m","messages":[{"role":"user","content":"list files"}],"tools":[{"name":"bash","input_schema":{"type":"object","properties":{"z":{},"a":{}}}}]}`,
			`{"model":"m","messages":[{"role":"user","content":"list files"},{"role":"assistant","content":[{"type":"thinking","thinking":"use ls","signature":"s"},{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"bash","input":{"command":"ls","b":1,"a":2.50}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"a.go"},{"type":"text","text":"and?"}]}],"tools":[{"name":"bash","input_schema":{"type":"object","properties":{"z":{},"a":{}}}}]}`, true),
		Entry("a role:system message among the new ones, merged into the leading one",
			`{"model":"m","system":[{"type":"text","text":"one"}],"messages":[{"role":"user","content":"hi"}]}`,
			`{"model":"m","system":[{"type":"text","text":"one"}],"messages":[{"role":"user","content":"hi"},{"role":"system","content":"two"},{"role":"user","content":"three"}]}`, true),
		Entry("a role:system message among the earlier ones", `{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"}]}`,
			`{"messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},{"role":"assistant","content":"a"},{"role":"user","content":"b"}]}`, true),
		Entry("no system at all, then one in the body", `{"messages":[{"role":"user","content":"hi"}]}`,
			`{"system":"now","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a"}]}`, true),
		Entry("the same list again", `{"messages":[{"role":"user","content":"hi"}]}`, `{"messages":[{"role":"user","content":"hi"}]}`, true),
		Entry("other tools", `{"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"a","input_schema":{"type":"object"}}]}`,
			`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x"}],"tools":[{"name":"b","input_schema":{"y":1,"type":"object"}}]}`, true),
		Entry("an earlier turn changed", `{"messages":[{"role":"user","content":"hi"}]}`,
			`{"messages":[{"role":"user","content":"hey"},{"role":"assistant","content":"a"}]}`, false),
		Entry("fewer messages", `{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"a"}]}`,
			`{"messages":[{"role":"user","content":"hi"}]}`, false),
	)

	DescribeTable("resumes only a request of the same dialect whose list continues the previous one",
		func(prevDialect lineage.Dialect, prev string, dialect lineage.Dialect, list string, resumed bool) {
			Expect(proxy.ResumesFrom(prevDialect, []byte(prev), dialect, []byte(list))).To(Equal(resumed))
		},
		Entry("Messages after Messages", lineage.DialectMessages, `[{"a":1}]`, lineage.DialectMessages, `[{"a":1},{"b":2}]`, true),
		Entry("chat after chat", lineage.DialectChat, `[{"a":1}]`, lineage.DialectChat, `[{"a":1},{"b":2}]`, true),
		// The Messages route drops thinking blocks from the items it
		// hashes; the chat route keeps every content part.
		Entry("chat after Messages", lineage.DialectMessages, `[{"a":1}]`, lineage.DialectChat, `[{"a":1},{"b":2}]`, false),
		Entry("Messages after chat", lineage.DialectChat, `[{"a":1}]`, lineage.DialectMessages, `[{"a":1},{"b":2}]`, false),
		Entry("an earlier turn changed", lineage.DialectMessages, `[{"a":1}]`, lineage.DialectMessages, `[{"a":2},{"b":2}]`, false),
	)

	// A long system turn makes every request larger than the size from
	// which the capture path reads messages beside the engine call.
	system := map[string]any{"role": "system", "content": strings.Repeat("Follow the repository's conventions. ", 1200)}
	tools := []any{map[string]any{"type": "function", "function": map[string]any{"name": "bash", "parameters": map[string]any{"type": "object"}}}}

	type call struct {
		body  map[string]any
		reply map[string]any
	}
	send := func(ctx SpecContext, url string, body map[string]any) call {
		GinkgoHelper()
		r := do(ctx, "POST", url, mustJSON(body), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		return call{body: body, reply: r.JSON()}
	}
	next := func(c call, user string) map[string]any {
		msg := c.reply["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		msgs := append(slices.Clone(c.body["messages"].([]any)), map[string]any{"role": "assistant", "content": msg["content"]},
			map[string]any{"role": "user", "content": user})
		out := map[string]any{"model": "policy", "messages": msgs}
		if t, ok := c.body["tools"]; ok {
			out["tools"] = t
		}
		return out
	}
	contextDigest := func(body map[string]any) string { return digestOf(lineage.DialectChat, body) }
	newest := func(ctx SpecContext, st testStore, rollout string) *record.Entry {
		GinkgoHelper()
		es := entries(ctx, st, rollout)
		Expect(es).NotTo(BeEmpty())
		return es[len(es)-1]
	}
	setup := func(ctx SpecContext, kind string) (testStore, *proxy.Proxy, func(string) string) {
		var st testStore = store.NewMemoryStore()
		if kind == "file" {
			fs, err := store.NewFileStore(GinkgoT().TempDir())
			Expect(err).NotTo(HaveOccurred())
			DeferCleanup(func() { Expect(fs.Close()).To(Succeed()) })
			st = fs
		}
		p := startProxy(ctx, startFake().URL(), st, func(o *proxy.Options) { o.RequestTokenIDs = true })
		return st, p, func(id string) string {
			return p.URL() + "/ng-rollout/" + id + "/training-token-capture/v1/chat/completions"
		}
	}

	DescribeTable("links every call to the one before, with the digest of its own items",
		func(ctx SpecContext, kind string) {
			st, p, url := setup(ctx, kind)
			c := send(ctx, url("conv"), map[string]any{"model": "policy", "messages": []any{system, map[string]any{"role": "user", "content": "start"}}, "tools": tools})
			prev := newest(ctx, st, "conv")
			for i := range 5 {
				c = send(ctx, url("conv"), next(c, fmt.Sprintf("step %d", i)))
				Expect(p.ConversationHeld("conv")).To(BeTrue())
				e := newest(ctx, st, "conv")
				Expect(*e.ParentResolution).To(Equal(record.ResolutionResolved), e.ParentResolutionReason)
				Expect(*e.ParentCallID).To(Equal(prev.ModelCallID))
				Expect(e.ContinuationContextDigest).To(Equal(contextDigest(c.body)))
				Expect(e.ContinuationContextLen).To(Equal(len(c.body["messages"].([]any)) + 1)) // and the envelope
				prev = e
			}
		},
		storeKinds,
	)

	DescribeTable("hashes a request again whose earlier turns or tools changed",
		func(ctx SpecContext, change func(map[string]any)) {
			st, _, url := setup(ctx, "memory")
			c := send(ctx, url("edit"), map[string]any{"model": "policy", "messages": []any{system, map[string]any{"role": "user", "content": "start"}}, "tools": tools})
			c = send(ctx, url("edit"), next(c, "go on"))
			body := next(c, "and again")
			change(body)
			send(ctx, url("edit"), body)
			e := newest(ctx, st, "edit")
			Expect(e.ContinuationContextDigest).To(Equal(contextDigest(body)))
			Expect(*e.ParentResolution).To(Equal(record.ResolutionUnresolved))
			Expect(e.ParentResolutionReason).To(Equal(lineage.ReasonNoMatch))
		},
		Entry("the first user turn rewritten", func(body map[string]any) {
			body["messages"].([]any)[1] = map[string]any{"role": "user", "content": "begin"}
		}),
		Entry("the tools changed", func(body map[string]any) {
			body["tools"] = []any{map[string]any{"type": "function", "function": map[string]any{"name": "cat", "parameters": map[string]any{"type": "object"}}}}
		}),
	)

	Describe("on the Messages route", func() {
		messagesURL := func(p *proxy.Proxy, id string) string {
			return p.URL() + "/ng-rollout/" + id + "/training-token-capture/v1/messages"
		}
		first := func() map[string]any {
			return map[string]any{"model": "policy", "max_tokens": 16, "system": system["content"],
				"messages": []any{map[string]any{"role": "user", "content": "start"}},
				"tools":    []any{map[string]any{"name": "bash", "input_schema": map[string]any{"type": "object"}}}}
		}
		nextMessages := func(c call, user string) map[string]any {
			out := maps.Clone(c.body)
			out["messages"] = append(slices.Clone(c.body["messages"].([]any)), map[string]any{"role": "assistant", "content": c.reply["content"]},
				map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": user}}})
			return out
		}
		messagesDigest := func(body map[string]any) string { return digestOf(lineage.DialectMessages, body) }

		It("links every call to the one before, with the digest of its own items", func(ctx SpecContext) {
			st, p, _ := setup(ctx, "file")
			c := send(ctx, messagesURL(p, "msgs"), first())
			prev := newest(ctx, st, "msgs")
			for i := range 5 {
				c = send(ctx, messagesURL(p, "msgs"), nextMessages(c, fmt.Sprintf("step %d", i)))
				Expect(p.ConversationHeld("msgs")).To(BeTrue())
				e := newest(ctx, st, "msgs")
				Expect(*e.ParentResolution).To(Equal(record.ResolutionResolved), e.ParentResolutionReason)
				Expect(*e.ParentCallID).To(Equal(prev.ModelCallID))
				Expect(e.ContinuationContextDigest).To(Equal(messagesDigest(c.body)))
				prev = e
			}
		})

		DescribeTable("hashes a request again whose earlier turns or tools changed",
			func(ctx SpecContext, change func(map[string]any)) {
				st, p, _ := setup(ctx, "memory")
				c := send(ctx, messagesURL(p, "medit"), first())
				c = send(ctx, messagesURL(p, "medit"), nextMessages(c, "go on"))
				body := nextMessages(c, "and again")
				change(body)
				send(ctx, messagesURL(p, "medit"), body)
				e := newest(ctx, st, "medit")
				Expect(e.ContinuationContextDigest).To(Equal(messagesDigest(body)))
				Expect(*e.ParentResolution).To(Equal(record.ResolutionUnresolved))
			},
			Entry("the first user turn rewritten", func(body map[string]any) {
				body["messages"].([]any)[0] = map[string]any{"role": "user", "content": "begin"}
			}),
			Entry("the tools changed", func(body map[string]any) {
				body["tools"] = []any{map[string]any{"name": "cat", "input_schema": map[string]any{"type": "object"}}}
			}),
			Entry("the system prompt changed", func(body map[string]any) {
				body["system"] = "You are terse."
			}),
		)
	})

	It("serves calls of one rollout sent at once from the same conversation", func(ctx SpecContext) {
		st, _, url := setup(ctx, "memory")
		c := send(ctx, url("fan"), map[string]any{"model": "policy", "messages": []any{system, map[string]any{"role": "user", "content": "start"}}})
		parent := newest(ctx, st, "fan")
		const n = 8
		bodies := make([]map[string]any, n)
		done := make(chan struct{}, n)
		for i := range n {
			bodies[i] = next(c, fmt.Sprintf("branch %d", i))
			go func() {
				defer GinkgoRecover()
				defer func() { done <- struct{}{} }()
				send(ctx, url("fan"), bodies[i])
			}()
		}
		for range n {
			<-done
		}
		es := entries(ctx, st, "fan")
		Expect(es).To(HaveLen(n + 1))
		want := map[string]bool{}
		for _, b := range bodies {
			want[contextDigest(b)] = true
		}
		for _, e := range es[1:] {
			Expect(*e.ParentCallID).To(Equal(parent.ModelCallID))
			Expect(want).To(HaveKey(e.ContinuationContextDigest))
			delete(want, e.ContinuationContextDigest)
		}
	})

	It("is held within the handed-bytes budget and given back with the rollout", func(ctx SpecContext) {
		st, p, url := setup(ctx, "file")
		p.SetHandedBudget(0)
		c := send(ctx, url("tight"), map[string]any{"model": "policy", "messages": []any{system, map[string]any{"role": "user", "content": "start"}}})
		send(ctx, url("tight"), next(c, "go on"))
		Expect(p.ConversationHeld("tight")).To(BeFalse(), "no budget: nothing is held")
		Expect(p.HandedBytes()).To(BeZero())
		Expect(*newest(ctx, st, "tight").ParentResolution).To(Equal(record.ResolutionResolved), "the call still links, hashing its whole conversation")

		p.SetHandedBudget(64 << 20)
		c = send(ctx, url("held"), map[string]any{"model": "policy", "messages": []any{system, map[string]any{"role": "user", "content": "start"}}})
		Expect(p.ConversationHeld("held")).To(BeTrue())
		Expect(p.HandedBytes()).To(BeNumerically(">", len(mustJSON(c.body))))
		_, err := st.Freeze(ctx, "held")
		Expect(err).NotTo(HaveOccurred())
		r := do(ctx, "POST", url("held"), mustJSON(next(c, "go on")), nil)
		Expect(r.Status).To(Equal(410), "the frozen rollout refuses the call, and the proxy lets the rollout go")
		Expect(p.ConversationHeld("held")).To(BeFalse())
		Expect(p.HandedBytes()).To(BeZero())
	})
})

// digestOf is the conversation digest of a request body's items in dialect
// d, worked out from the body alone.
func digestOf(d lineage.Dialect, body map[string]any) string {
	GinkgoHelper()
	var decoded map[string]any
	dec := json.NewDecoder(strings.NewReader(string(mustJSON(body))))
	dec.UseNumber()
	Expect(dec.Decode(&decoded)).To(Succeed())
	items, err := lineage.RequestItems(d, decoded)
	Expect(err).NotTo(HaveOccurred())
	digest, err := lineage.ConversationDigest(items)
	Expect(err).NotTo(HaveOccurred())
	return digest
}
