package vllm_test

import (
	"encoding/json"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/tokenizer"
	"github.com/capbench/capbench/fakes/vllm"
)

var _ = Describe("scripts", func() {
	var (
		s   *vllm.Server
		tok *tokenizer.Tokenizer
	)
	BeforeEach(func() {
		s = startFake(vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "hermes"})
		tok = tokenizer.New()
		Expect(s.SetScript(vllm.Script{Name: "three", Turns: []vllm.Turn{
			{Content: "first"}, {Content: "second"}, {Content: "last"},
		}})).To(Succeed())
	})

	chatWith := func(script string, msgs []any, extra map[string]any) map[string]any {
		req := map[string]any{"messages": msgs, "return_token_ids": true}
		for k, v := range extra {
			req[k] = v
		}
		r := post(s.URL()+"/v1/chat/completions", req, "X-Fake-Script", script)
		Expect(r.status).To(Equal(http.StatusOK), string(r.body))
		return r.json()
	}
	user := func(t string) map[string]any { return map[string]any{"role": "user", "content": t} }
	asst := func(t string) map[string]any { return map[string]any{"role": "assistant", "content": t} }

	DescribeTable("picks the turn by the number of assistant messages",
		func(msgs []any, want string) {
			m := chatWith("three", msgs, nil)
			Expect(firstChoice(m)["message"].(map[string]any)["content"]).To(Equal(want))
		},
		Entry("no assistant yet", []any{user("a")}, "first"),
		Entry("one assistant", []any{user("a"), asst("first"), user("b")}, "second"),
		Entry("beyond the script: the last turn repeats", []any{user("a"), asst("1"), user("b"), asst("2"), user("c"), asst("3"), user("d")}, "last"),
	)

	It("generates only EOS for an Empty turn, as vLLM does for an immediate EOS", func() {
		Expect(s.SetScript(vllm.Script{Name: "empty", Turns: []vllm.Turn{{Empty: true}}})).To(Succeed())
		m := chatWith("empty", []any{user("a")}, nil)
		ch := firstChoice(m)
		Expect(ch["message"].(map[string]any)["content"]).To(Equal(""))
		Expect(toInts(ch["token_ids"])).To(Equal([]int{eosID}))
		Expect(m["usage"].(map[string]any)["completion_tokens"]).To(BeNumerically("==", 1))
		Expect(ch["finish_reason"]).To(Equal("stop"))
	})

	DescribeTable("honours exact lengths",
		func(turn vllm.Turn, wantLen int, wantFinish string) {
			Expect(s.SetScript(vllm.Script{Name: "len", Turns: []vllm.Turn{turn}})).To(Succeed())
			ch := firstChoice(chatWith("len", []any{user("a")}, nil))
			ids := toInts(ch["token_ids"])
			Expect(ids).To(HaveLen(wantLen))
			Expect(ch["finish_reason"]).To(Equal(wantFinish))
			if wantFinish == "stop" {
				Expect(ids[len(ids)-1]).To(Equal(eosID))
				Expect(ids).To(Equal(tok.Encode(ch["message"].(map[string]any)["content"].(string) + "<|im_end|>")))
			}
		},
		Entry("padded to 40 tokens, stopping naturally", vllm.Turn{Content: "Hello", Tokens: 40}, 40, "stop"),
		Entry("padded to 123 tokens", vllm.Turn{Content: "Answer:", Tokens: 123}, 123, "stop"),
		Entry("stopped by length at 10", vllm.Turn{Content: "Hello", Tokens: 10, StopByLength: true}, 10, "length"),
		Entry("a long script cut at 3", vllm.Turn{Content: "one two three four five six seven", Tokens: 3}, 3, "length"),
	)

	It("installs scripts over HTTP and rejects bad ones", func() {
		r := do(http.MethodPut, s.URL()+"/fake/scripts/web", "application/json", []byte(`{"turns":[{"content":"from http"}]}`))
		Expect(r.status).To(Equal(http.StatusNoContent))
		m := chatWith("web", []any{user("a")}, nil)
		Expect(firstChoice(m)["message"].(map[string]any)["content"]).To(Equal("from http"))
		Expect(do(http.MethodPut, s.URL()+"/fake/scripts/bad", "application/json", []byte(`{"turns":[]}`)).status).To(Equal(http.StatusBadRequest))
		Expect(do(http.MethodPut, s.URL()+"/fake/scripts/bad", "application/json", []byte(`{"turns":[{"fault":"boom"}]}`)).status).To(Equal(http.StatusBadRequest))
		Expect(do(http.MethodPut, s.URL()+"/fake/scripts/bad", "application/json", []byte(`{"turns":`)).status).To(Equal(http.StatusBadRequest))
		Expect(s.SetScript(vllm.Script{Turns: []vllm.Turn{{}}})).NotTo(Succeed())
	})

	DescribeTable("answers an unknown script name with vLLM's error envelope (400, which clients show and do not retry), naming the script and the fix",
		func(stream bool) {
			r := post(s.URL()+"/v1/chat/completions", map[string]any{"messages": []any{user("a")}, "stream": stream}, "X-Fake-Script", "missing")
			Expect(r.status).To(Equal(http.StatusBadRequest))
			Expect(r.header.Get("Content-Type")).To(Equal("application/json"))
			e := r.json()["error"].(map[string]any)
			Expect(e["type"]).To(Equal("BadRequestError"))
			Expect(e["param"]).To(Equal("X-Fake-Script"))
			Expect(e["code"]).To(BeNumerically("==", 400))
			Expect(e["message"]).To(Equal(`fake script "missing" does not exist; installed scripts: three. ` +
				`Install it with PUT /fake/scripts/missing or fix the X-Fake-Script header`))
		},
		Entry("non-streaming", false),
		Entry("streaming: the error comes before any event", true),
	)

	Describe("routes: one header value for a whole session", func() {
		BeforeEach(func() {
			for _, sc := range []vllm.Script{
				{Name: "sub", Turns: []vllm.Turn{{Content: "sub-agent reply"}}},
				{Name: "explore", Turns: []vllm.Turn{{Content: "explore reply"}}},
				{Name: "title", Turns: []vllm.Turn{{Content: "A title"}}},
				{Name: "compact", Turns: []vllm.Turn{{Content: "A summary"}}},
				{Name: "session", Turns: []vllm.Turn{{Content: "main reply"}, {Content: "main again"}}, Routes: []vllm.Route{
					{AgentID: "agent-explore", Script: "explore"},
					{SubAgent: true, Script: "sub"},
					{System: "Generate a concise title", Script: "title"},
					{User: "create a detailed summary", Script: "compact"},
				}},
			} {
				Expect(s.SetScript(sc)).To(Succeed())
			}
		})
		sys := func(t string) map[string]any { return map[string]any{"role": "system", "content": t} }
		parts := func(role, t string) map[string]any {
			return map[string]any{"role": role, "content": []any{map[string]any{"type": "text", "text": t}}}
		}

		DescribeTable("picks the script by agent and by what the call asks",
			func(msgs []any, headers []string, want string) {
				r := post(s.URL()+"/v1/chat/completions", map[string]any{"messages": msgs},
					append([]string{"X-Fake-Script", "session"}, headers...)...)
				Expect(r.status).To(Equal(http.StatusOK), string(r.body))
				Expect(firstChoice(r.json())["message"].(map[string]any)["content"]).To(Equal(want))
			},
			Entry("the main agent plays the script itself", []any{sys("You are Claude Code"), user("fix it")}, nil, "main reply"),
			Entry("the main agent's turn index still counts its assistant turns",
				[]any{user("fix it"), asst("main reply"), user("more")}, nil, "main again"),
			Entry("a sub-agent (x-claude-code-agent-id) gets its own script, turn 0 of it",
				[]any{sys("You are a sub-agent"), user("run the build"), asst("x"), user("go on")},
				[]string{"X-Claude-Code-Agent-Id", "a3f9"}, "sub-agent reply"),
			Entry("an exact agent id wins over the generic sub-agent route (routes go in order)",
				[]any{user("explore")}, []string{"x-claude-code-agent-id", "agent-explore"}, "explore reply"),
			Entry("a title call, by its system prompt (text parts)",
				[]any{parts("system", "Generate a concise title for this conversation"), user("fix it")}, nil, "A title"),
			Entry("a compaction call, by its user message",
				[]any{user("fix it"), asst("main reply"), parts("user", "Your task is to create a detailed summary of the conversation so far")}, nil, "A summary"),
		)

		It("reports a route to a missing script in the client's error, naming both scripts", func() {
			Expect(s.SetScript(vllm.Script{Name: "dangling", Turns: []vllm.Turn{{Content: "x"}},
				Routes: []vllm.Route{{SubAgent: true, Script: "nowhere"}}})).To(Succeed())
			r := post(s.URL()+"/v1/chat/completions", map[string]any{"messages": []any{user("a")}},
				"X-Fake-Script", "dangling", "X-Claude-Code-Agent-Id", "a1")
			Expect(r.status).To(Equal(http.StatusBadRequest))
			Expect(r.json()["error"].(map[string]any)["message"]).To(HavePrefix(`fake script "nowhere" does not exist (a route of script "dangling" names it); installed scripts: `))
		})

		DescribeTable("refuses routes that cannot work",
			func(sc vllm.Script, want string) {
				Expect(s.SetScript(sc)).To(MatchError(ContainSubstring(want)))
				b, err := json.Marshal(sc)
				Expect(err).NotTo(HaveOccurred())
				r := do(http.MethodPut, s.URL()+"/fake/scripts/"+sc.Name, "application/json", b)
				Expect(r.status).To(Equal(http.StatusBadRequest))
				Expect(r.json()["error"].(map[string]any)["message"]).To(Equal(want))
			},
			Entry("no condition", vllm.Script{Name: "r", Turns: []vllm.Turn{{}}, Routes: []vllm.Route{{Script: "sub"}}},
				`script "r" route 0: no condition (set sub_agent, agent_id, system or user)`),
			Entry("no script", vllm.Script{Name: "r", Turns: []vllm.Turn{{}}, Routes: []vllm.Route{{SubAgent: true}}},
				`script "r" route 0: no script named`),
		)
	})

	Describe("faults on the first N attempts only", func() {
		BeforeEach(func() {
			Expect(s.SetScript(vllm.Script{Name: "flaky", Turns: []vllm.Turn{
				{Content: "first", Fault: vllm.Fault503, FaultTimes: 2},
				{Content: "second"},
			}})).To(Succeed())
		})

		It("fails the first two identical attempts, then succeeds, per prompt", func() {
			req := map[string]any{"messages": []any{user("a")}}
			Expect(post(s.URL()+"/v1/chat/completions", req, "X-Fake-Script", "flaky").status).To(Equal(http.StatusServiceUnavailable))
			// Another prompt at the same turn has its own count.
			other := map[string]any{"messages": []any{user("b")}}
			Expect(post(s.URL()+"/v1/chat/completions", other, "X-Fake-Script", "flaky").status).To(Equal(http.StatusServiceUnavailable))
			Expect(post(s.URL()+"/v1/chat/completions", req, "X-Fake-Script", "flaky").status).To(Equal(http.StatusServiceUnavailable))
			for range 2 {
				r := post(s.URL()+"/v1/chat/completions", req, "X-Fake-Script", "flaky")
				Expect(r.status).To(Equal(http.StatusOK), string(r.body))
				Expect(firstChoice(r.json())["message"].(map[string]any)["content"]).To(Equal("first"))
			}
			Expect(s.Ledger()).To(HaveLen(2), "faulted attempts generate nothing")
		})

		It("cuts a stream on the first attempt and streams the retry whole", func() {
			Expect(s.SetScript(vllm.Script{Name: "cut", Turns: []vllm.Turn{
				{Content: "a reply long enough to be cut in the middle", Fault: vllm.FaultDropMidStream, FaultTimes: 1},
			}})).To(Succeed())
			req := map[string]any{"messages": []any{user("a")}, "stream": true}
			b, err := json.Marshal(req)
			Expect(err).NotTo(HaveOccurred())
			first, err := rawPost(s.URL()+"/v1/chat/completions", b, "X-Fake-Script", "cut")
			Expect(err).To(HaveOccurred(), "the first attempt's body is cut")
			Expect(first).NotTo(ContainSubstring("[DONE]"))
			second, err := rawPost(s.URL()+"/v1/chat/completions", b, "X-Fake-Script", "cut")
			Expect(err).NotTo(HaveOccurred())
			Expect(second).To(ContainSubstring("data: [DONE]"))
		})

		It("refuses fault_times without a fault, or below zero", func() {
			Expect(s.SetScript(vllm.Script{Name: "x", Turns: []vllm.Turn{{FaultTimes: 1}}})).To(MatchError(`script "x" turn 0: fault_times without a fault`))
			Expect(s.SetScript(vllm.Script{Name: "x", Turns: []vllm.Turn{{Fault: "500", FaultTimes: -1}}})).To(MatchError(`script "x" turn 0: negative fault_times`))
		})
	})

	Describe("prompt chaining on the plain template", func() {
		BeforeEach(func() {
			Expect(s.SetScript(vllm.Script{Name: "agent", Turns: []vllm.Turn{
				{ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
				{Content: "It is sunny in Paris."},
				{Content: "You are welcome."},
			}})).To(Succeed())
		})

		It("extends prompt+generation exactly when the reply is echoed back", func() {
			tools := []any{weatherTool()}
			msgs := []any{user("Weather in Paris?")}
			m1 := chatWith("agent", msgs, map[string]any{"tools": tools})
			ch1 := firstChoice(m1)
			Expect(ch1["finish_reason"]).To(Equal("tool_calls"))
			msg1 := ch1["message"].(map[string]any)
			Expect(msg1["content"]).To(BeNil())
			call := msg1["tool_calls"].([]any)[0].(map[string]any)
			Expect(call["id"]).To(MatchRegexp(`^chatcmpl-tool-[0-9a-f]{16}$`))
			Expect(call["function"].(map[string]any)["arguments"]).To(Equal(`{"city": "Paris"}`))

			msgs = append(msgs, map[string]any{"role": "assistant", "content": msg1["content"], "tool_calls": msg1["tool_calls"]},
				map[string]any{"role": "tool", "tool_call_id": call["id"], "content": "sunny"})
			m2 := chatWith("agent", msgs, map[string]any{"tools": tools})
			p1, g1, p2 := toInts(m1["prompt_token_ids"]), toInts(ch1["token_ids"]), toInts(m2["prompt_token_ids"])
			Expect(p2[:len(p1)+len(g1)]).To(Equal(append(append([]int{}, p1...), g1...)))

			ch2 := firstChoice(m2)
			msgs = append(msgs, map[string]any{"role": "assistant", "content": ch2["message"].(map[string]any)["content"]}, user("thanks"))
			m3 := chatWith("agent", msgs, map[string]any{"tools": tools})
			g2, p3 := toInts(ch2["token_ids"]), toInts(m3["prompt_token_ids"])
			Expect(p3[:len(p2)+len(g2)]).To(Equal(append(append([]int{}, p2...), g2...)))
			Expect(firstChoice(m3)["message"].(map[string]any)["content"]).To(Equal("You are welcome."))
		})
	})
})

var _ = Describe("ledger bounds", func() {
	It("drops the oldest entries once they hold more than LedgerMaxBytes, keeping the newest", func() {
		s := startFake(vllm.Options{LedgerMaxBytes: 8 << 10})
		long := strings.Repeat("word ", 2000) // 2000+ prompt tokens: over 2 KB an entry
		for i := range 10 {
			Expect(post(s.URL()+"/v1/chat/completions", userChat(long+itoa(i), map[string]any{"max_tokens": 2})).status).To(Equal(http.StatusOK))
		}
		entries, bytes, dropped := s.LedgerStats()
		Expect(bytes).To(BeNumerically("<=", 8<<10))
		Expect(entries).To(BeNumerically(">=", 1))
		Expect(uint64(entries) + dropped).To(Equal(uint64(10)))
		Expect(dropped).To(BeNumerically(">=", 6))
		led := s.Ledger()
		Expect(led).To(HaveLen(entries))
		Expect(led[len(led)-1].Seq).To(Equal(uint64(10)), "the newest entry is kept")

		r := get(s.URL() + "/fake/ledger")
		Expect(r.header.Get(vllm.LedgerDroppedHeader)).To(Equal(itoa(int(dropped))))
	})

	It("keeps the newest entry even when it alone is over the bound", func() {
		s := startFake(vllm.Options{LedgerMaxBytes: 16})
		Expect(post(s.URL()+"/v1/chat/completions", userChat("a", map[string]any{"max_tokens": 2})).status).To(Equal(http.StatusOK))
		Expect(post(s.URL()+"/v1/chat/completions", userChat("b", map[string]any{"max_tokens": 2})).status).To(Equal(http.StatusOK))
		led := s.Ledger()
		Expect(led).To(HaveLen(1))
		Expect(led[0].Seq).To(Equal(uint64(2)))
	})

	It("stays bounded over a long run of long prompts (memory flat in the number of calls)", func() {
		s := startFake(vllm.Options{LedgerMaxBytes: 256 << 10})
		long := strings.Repeat("token ", 2000) // about 4 KB an entry
		for i := range 300 {
			Expect(post(s.URL()+"/v1/chat/completions", userChat(long+itoa(i), map[string]any{"max_tokens": 4})).status).To(Equal(http.StatusOK))
		}
		entries, bytes, dropped := s.LedgerStats()
		Expect(bytes).To(BeNumerically("<=", 256<<10))
		Expect(dropped).To(BeNumerically(">", 200))
		Expect(uint64(entries) + dropped).To(Equal(uint64(300)))
	})

	It("serves only newer entries with ?after=SEQ, so a reader that keeps up reads each once", func() {
		s := startFake(vllm.Options{})
		for i := range 5 {
			Expect(post(s.URL()+"/v1/chat/completions", userChat("n"+itoa(i), map[string]any{"max_tokens": 2})).status).To(Equal(http.StatusOK))
		}
		var all, newer, none []vllm.LedgerEntry
		Expect(json.Unmarshal(get(s.URL()+"/fake/ledger").body, &all)).To(Succeed())
		Expect(all).To(HaveLen(5))
		Expect(json.Unmarshal(get(s.URL()+"/fake/ledger?after=3").body, &newer)).To(Succeed())
		Expect(newer).To(HaveLen(2))
		Expect(newer[0].Seq).To(Equal(uint64(4)))
		Expect(newer[0].RequestID).To(Equal(all[3].RequestID))
		r := get(s.URL() + "/fake/ledger?after=99")
		Expect(string(r.body)).To(Equal("[]"))
		Expect(json.Unmarshal(r.body, &none)).To(Succeed())
		es, dropped := s.LedgerAfter(4)
		Expect(es).To(HaveLen(1))
		Expect(dropped).To(BeZero())
		bad := get(s.URL() + "/fake/ledger?after=-1")
		Expect(bad.status).To(Equal(http.StatusBadRequest))
		Expect(string(bad.body)).To(ContainSubstring(`after=\"-1\": want a ledger seq`))
	})

	It("refuses a negative entry limit", func() {
		_, err := vllm.New(vllm.Options{LedgerLimit: -1})
		Expect(err).To(MatchError(ContainSubstring("ledger limit must not be negative")))
	})
})

var _ = Describe("ledger limit", func() {
	It("keeps only the newest entries", func() {
		s := startFake(vllm.Options{LedgerLimit: 3})
		var ids []string
		for i := range 8 {
			m := post(s.URL()+"/v1/chat/completions", userChat("n"+itoa(i), map[string]any{"max_tokens": 2})).json()
			ids = append(ids, m["id"].(string))
		}
		led := s.Ledger()
		Expect(led).To(HaveLen(3))
		Expect([]string{led[0].RequestID, led[1].RequestID, led[2].RequestID}).To(Equal(ids[5:]))
	})
})

var _ = Describe("ledger entries read back", func() {
	It("bit for bit: ids, log-probs, text and times survive the packed ring", func() {
		s := startFake(vllm.Options{Seed: 3})
		r := post(s.URL()+"/v1/chat/completions", userChat("héllo ✓", map[string]any{"max_tokens": 12, "logprobs": true, "return_token_ids": true})).json()
		led := s.Ledger()
		Expect(led).To(HaveLen(1))
		e := led[0]
		Expect(e.Seq).To(Equal(uint64(1)))
		Expect(e.RequestID).To(Equal(r["id"]))
		Expect(e.Model).To(Equal(vllm.DefaultModel))
		Expect(e.PromptTokenIDs).To(Equal(toInts(r["prompt_token_ids"])))
		ch := firstChoice(r)
		Expect(e.GeneratedTokenIDs).To(Equal(toInts(ch["token_ids"])))
		var lps []float64
		for _, c := range ch["logprobs"].(map[string]any)["content"].([]any) {
			lps = append(lps, c.(map[string]any)["logprob"].(float64))
		}
		Expect(e.LogProbs).To(Equal(lps))
		Expect(e.FinishReason).To(Equal(ch["finish_reason"]))
		Expect(e.Created.Unix()).To(BeNumerically("==", r["created"]))
	})
})

var _ = DescribeTable("unscripted filler built as token ids is exactly the tokenizer's encoding of its text",
	func(variant string) {
		Expect(vllm.CheckFillerIDs(variant, 3000)).To(Succeed())
	},
	Entry("plain template (the fast path)", "plain"),
	Entry("thinking template (encoded as before)", "thinking"),
)
