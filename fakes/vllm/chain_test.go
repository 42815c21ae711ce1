package vllm_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/tokenizer"
	"github.com/capbench/capbench/fakes/vllm"
)

// The plain template's promise (and the thinking variant's, inside a tool loop): echoing a reply back (content, reasoning and
// tool calls as the API returned them) yields a prompt that starts with the
// previous prompt followed by the generated ids.
var _ = Describe("prompt chaining across turn shapes", func() {
	DescribeTable("the next prompt extends prompt + generation",
		func(variant string, turn vllm.Turn, next string) {
			s := startFake(vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "hermes", ReasoningParser: "qwen3", ChatTemplateVariant: variant})
			Expect(s.SetScript(vllm.Script{Name: "t", Turns: []vllm.Turn{turn, {Content: "ok"}}})).To(Succeed())
			tok := tokenizer.New()
			msgs := []any{map[string]any{"role": "system", "content": "You are terse."}, map[string]any{"role": "user", "content": "go"}}
			req := map[string]any{"messages": msgs, "tools": []any{weatherTool()}, "return_token_ids": true}
			m1 := post(s.URL()+"/v1/chat/completions", req, "X-Fake-Script", "t").json()
			ch := firstChoice(m1)
			gen := toInts(ch["token_ids"])
			Expect(gen).To(Equal(tok.Encode(s.Ledger()[0].Text)))

			msg := ch["message"].(map[string]any)
			echo := map[string]any{"role": "assistant", "content": msg["content"]}
			if r, ok := msg["reasoning"]; ok && r != nil {
				echo["reasoning"] = r
			}
			if tc, ok := msg["tool_calls"]; ok {
				echo["tool_calls"] = tc
			}
			msgs = append(msgs, echo)
			if next == "tool" {
				msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": "x", "content": "result"})
			} else {
				msgs = append(msgs, map[string]any{"role": "user", "content": "more"})
			}
			req["messages"] = msgs
			m2 := post(s.URL()+"/v1/chat/completions", req, "X-Fake-Script", "t").json()
			p1, p2 := toInts(m1["prompt_token_ids"]), toInts(m2["prompt_token_ids"])
			want := append(append([]int{}, p1...), gen...)
			Expect(len(p2)).To(BeNumerically(">", len(want)))
			Expect(p2[:len(want)]).To(Equal(want))
		},
		Entry("plain answer, new user turn", "plain", vllm.Turn{Content: "Paris is sunny."}, "user"),
		Entry("multi-line unicode answer", "plain", vllm.Turn{Content: "Zürich: 12°C\n東京: 20°C\n- done"}, "user"),
		Entry("reasoning then answer", "plain", vllm.Turn{Reasoning: "The user wants weather.", Content: "Sunny."}, "user"),
		Entry("tool call only", "plain", vllm.Turn{ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}}, "tool"),
		Entry("reasoning and two tool calls", "plain", vllm.Turn{Reasoning: "Two cities.", ToolCalls: []vllm.ScriptToolCall{
			{Name: "get_weather", Arguments: `{"city": "Paris"}`}, {Name: "get_weather", Arguments: `{"city": "Rome"}`}}}, "tool"),
		Entry("non-ASCII tool arguments", "plain", vllm.Turn{ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Zürich"}`}}}, "tool"),
		Entry("exact length padding", "plain", vllm.Turn{Content: "Start.", Tokens: 60}, "user"),
		Entry("thinking variant inside a tool loop", "thinking", vllm.Turn{Reasoning: "Need the weather.", ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}}, "tool"),
	)
})
