package vllm_test

import (
	"net/http"

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

	It("answers an unknown script name with 404", func() {
		r := post(s.URL()+"/v1/chat/completions", map[string]any{"messages": []any{user("a")}}, "X-Fake-Script", "missing")
		Expect(r.status).To(Equal(http.StatusNotFound))
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
