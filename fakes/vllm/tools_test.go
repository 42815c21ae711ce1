package vllm_test

import (
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

func errorOf(r reply) map[string]any {
	GinkgoHelper()
	e, ok := r.json()["error"].(map[string]any)
	Expect(ok).To(BeTrue(), string(r.body))
	return e
}

var toolTurn = vllm.Script{Name: "tool", Turns: []vllm.Turn{{
	Content:   "Let me check.",
	ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city":"Paris","days":2}`}},
}}}

var _ = Describe("tool gatekeeping without a tool parser", func() {
	DescribeTable("answers vLLM's 400 for tool choices that need a parser",
		func(opts vllm.Options, choice any, want string) {
			s := startFake(opts)
			req := userChat("weather?", map[string]any{"tools": []any{weatherTool()}})
			if choice != nil {
				req["tool_choice"] = choice
			}
			r := post(s.URL()+"/v1/chat/completions", req)
			Expect(r.status).To(Equal(http.StatusBadRequest))
			e := errorOf(r)
			Expect(e["message"]).To(Equal(want))
			Expect(e["type"]).To(Equal("BadRequestError"))
			Expect(e["code"]).To(BeNumerically("==", 400))
		},
		Entry("tools without tool_choice", vllm.Options{}, nil, `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`),
		Entry("auto", vllm.Options{}, "auto", `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`),
		Entry("required", vllm.Options{}, "required", `tool_choice="required" requires --tool-call-parser to be set`),
		Entry("named", vllm.Options{}, map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}, `tool_choice=function "get_weather" requires --tool-call-parser to be set`),
		Entry("parser alone is inert", vllm.Options{ToolCallParser: "hermes"}, "auto", `"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set`),
	)

	It("returns tool-call syntax as plain text: the silent failure", func() {
		s := startFake(vllm.Options{})
		Expect(s.SetScript(toolTurn)).To(Succeed())
		for _, extra := range []map[string]any{nil, {"tools": []any{weatherTool()}, "tool_choice": "none"}} {
			m := post(s.URL()+"/v1/chat/completions", userChat("weather?", extra), "X-Fake-Script", "tool").json()
			ch := firstChoice(m)
			msg := ch["message"].(map[string]any)
			Expect(msg).NotTo(HaveKey("tool_calls"))
			Expect(msg["content"]).To(ContainSubstring(`<tool_call>`))
			Expect(msg["content"]).To(ContainSubstring(`"name": "get_weather"`))
			Expect(ch["finish_reason"]).To(Equal("stop"))
		}
	})
})

var _ = Describe("tool-request validation", func() {
	var s *vllm.Server
	BeforeEach(func() { s = startFake(vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "hermes"}) })

	DescribeTable("rejects malformed tool requests",
		func(extra map[string]any, want string) {
			r := post(s.URL()+"/v1/chat/completions", userChat("x", extra))
			Expect(r.status).To(Equal(http.StatusBadRequest))
			Expect(errorOf(r)["message"]).To(Equal(want))
		},
		Entry("empty tools", map[string]any{"tools": []any{}}, "`tools` must not be an empty array. Either provide at least one tool or omit the field entirely. (parameter=tools)"),
		Entry("tool_choice without tools", map[string]any{"tool_choice": "auto"}, "When using `tool_choice`, `tools` must be set. (parameter=tool_choice)"),
		Entry("bad tool_choice", map[string]any{"tools": []any{weatherTool()}, "tool_choice": "sometimes"}, "Invalid value for `tool_choice`: sometimes! Only named tools, \"none\", \"auto\" or \"required\" are supported. (parameter=tool_choice)"),
		Entry("unknown named tool", map[string]any{"tools": []any{weatherTool()}, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "nope"}}}, "The tool specified in `tool_choice` does not match any of the specified `tools` (parameter=tool_choice)"),
	)
})

var _ = Describe("hermes tool parsing", func() {
	var s *vllm.Server
	BeforeEach(func() {
		s = startFake(vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "hermes"})
		Expect(s.SetScript(toolTurn)).To(Succeed())
		Expect(s.SetScript(vllm.Script{Name: "two", Turns: []vllm.Turn{{ToolCalls: []vllm.ScriptToolCall{
			{Name: "get_weather", Arguments: `{"city": "Paris"}`}, {Name: "get_weather", Arguments: `{"city": "Rome"}`},
		}}}})).To(Succeed())
	})
	tools := map[string]any{"tools": []any{weatherTool()}}

	It("turns <tool_call> blocks into tool_calls with Python-spaced arguments", func() {
		m := post(s.URL()+"/v1/chat/completions", userChat("weather?", tools), "X-Fake-Script", "tool").json()
		ch := firstChoice(m)
		Expect(ch["finish_reason"]).To(Equal("tool_calls"))
		msg := ch["message"].(map[string]any)
		Expect(msg["content"]).To(Equal("Let me check.\n")) // vLLM keeps the text before <tool_call> raw
		calls := msg["tool_calls"].([]any)
		Expect(calls).To(HaveLen(1))
		call := calls[0].(map[string]any)
		Expect(call["type"]).To(Equal("function"))
		fn := call["function"].(map[string]any)
		Expect(fn["name"]).To(Equal("get_weather"))
		Expect(fn["arguments"]).To(Equal(`{"city": "Paris", "days": 2}`))
	})

	It("returns parallel calls in order, or only the first with parallel_tool_calls false", func() {
		m := post(s.URL()+"/v1/chat/completions", userChat("weather?", tools), "X-Fake-Script", "two").json()
		Expect(firstChoice(m)["message"].(map[string]any)["tool_calls"]).To(HaveLen(2))
		m = post(s.URL()+"/v1/chat/completions", userChat("weather?", map[string]any{"tools": []any{weatherTool()}, "parallel_tool_calls": false}), "X-Fake-Script", "two").json()
		Expect(firstChoice(m)["message"].(map[string]any)["tool_calls"]).To(HaveLen(1))
	})

	It("streams the name entry first, then raw argument text, with content null", func() {
		st := streamChat(s.URL(), userChat("weather?", map[string]any{"tools": []any{weatherTool()}, "return_token_ids": true}), "X-Fake-Script", "two")
		Expect(st.finish).To(Equal("tool_calls"))
		Expect(st.toolNames).To(Equal([]string{"get_weather", "get_weather"}))
		Expect(st.toolIDs[0]).To(MatchRegexp(`^chatcmpl-tool-[0-9a-f]{16}$`))
		Expect(st.toolArgs).To(Equal(map[int]string{0: `{"city": "Paris"}`, 1: `{"city": "Rome"}`}))
		Expect(st.sawNullCnt).To(BeTrue())
		Expect(st.tokenIDs).To(Equal(s.Ledger()[0].GeneratedTokenIDs))
	})

	It("serves tool_choice required and named through constrained output", func() {
		m := post(s.URL()+"/v1/chat/completions", userChat("weather?", map[string]any{"tools": []any{weatherTool()}, "tool_choice": "required"}), "X-Fake-Script", "tool").json()
		ch := firstChoice(m)
		Expect(ch["finish_reason"]).To(Equal("tool_calls"))
		Expect(ch["message"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["arguments"]).To(Equal(`{"city": "Paris", "days": 2}`))
		m = post(s.URL()+"/v1/chat/completions", userChat("weather?", map[string]any{"tools": []any{weatherTool()}, "tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "get_weather"}}}), "X-Fake-Script", "tool").json()
		ch = firstChoice(m)
		Expect(ch["finish_reason"]).To(Equal("stop"))
		Expect(ch["message"].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)["function"].(map[string]any)["name"]).To(Equal("get_weather"))
	})
})

var _ = Describe("reasoning parser", func() {
	script := vllm.Script{Name: "think", Turns: []vllm.Turn{{Reasoning: "The user greets me.", Content: "Hello there!"}}}

	It("splits Thinking-2507 output into reasoning and content, streaming and not", func() {
		s := startFake(vllm.Options{ReasoningParser: "qwen3", ChatTemplateVariant: "thinking"})
		Expect(s.SetScript(script)).To(Succeed())
		m := post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"return_token_ids": true}), "X-Fake-Script", "think").json()
		Expect(toInts(m["prompt_token_ids"])).To(HaveLen(len(toInts(m["prompt_token_ids"]))))
		msg := firstChoice(m)["message"].(map[string]any)
		Expect(msg["reasoning"]).To(Equal("The user greets me.\n"))
		Expect(msg["content"]).To(Equal("\n\nHello there!"))
		details := m["usage"].(map[string]any)["completion_tokens_details"].(map[string]any)
		Expect(details["reasoning_tokens"]).To(BeNumerically(">", 0))

		st := streamChat(s.URL(), userChat("hi", nil), "X-Fake-Script", "think")
		Expect(st.reasoning).To(Equal("The user greets me.\n"))
		Expect(st.content).To(Equal("\n\nHello there!"))
	})

	It("leaves </think> in the content without a reasoning parser", func() {
		s := startFake(vllm.Options{ChatTemplateVariant: "thinking"})
		Expect(s.SetScript(script)).To(Succeed())
		msg := firstChoice(post(s.URL()+"/v1/chat/completions", userChat("hi", nil), "X-Fake-Script", "think").json())["message"].(map[string]any)
		Expect(msg["reasoning"]).To(BeNil())
		Expect(msg["content"]).To(Equal("The user greets me.\n</think>\n\nHello there!"))
	})

	It("reports everything as reasoning when </think> never comes (length stop)", func() {
		s := startFake(vllm.Options{ReasoningParser: "qwen3", ChatTemplateVariant: "thinking"})
		Expect(s.SetScript(script)).To(Succeed())
		ch := firstChoice(post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"max_tokens": 2}), "X-Fake-Script", "think").json())
		Expect(ch["finish_reason"]).To(Equal("length"))
		Expect(ch["message"].(map[string]any)["content"]).To(BeNil())
		Expect(ch["message"].(map[string]any)["reasoning"]).NotTo(BeEmpty())
	})

	It("splits the plain template's <think> block too", func() {
		s := startFake(vllm.Options{ReasoningParser: "qwen3", EnableAutoToolChoice: true, ToolCallParser: "hermes"})
		Expect(s.SetScript(vllm.Script{Name: "both", Turns: []vllm.Turn{{Reasoning: "Need weather.", ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Oslo"}`}}}}})).To(Succeed())
		ch := firstChoice(post(s.URL()+"/v1/chat/completions", userChat("hi", map[string]any{"tools": []any{weatherTool()}}), "X-Fake-Script", "both").json())
		msg := ch["message"].(map[string]any)
		Expect(msg["reasoning"]).To(ContainSubstring("Need weather."))
		Expect(msg["content"]).To(BeNil())
		Expect(msg["tool_calls"]).To(HaveLen(1))
		Expect(ch["finish_reason"]).To(Equal("tool_calls"))
	})
})

var _ = Describe("chat template selection", func() {
	history := []any{
		map[string]any{"role": "user", "content": "hi"},
		map[string]any{"role": "assistant", "content": "Hello!", "reasoning": "SECRET-THOUGHT"},
		map[string]any{"role": "user", "content": "again"},
	}
	promptText := func(s *vllm.Server, extra map[string]any) string {
		req := map[string]any{"messages": history}
		for k, v := range extra {
			req[k] = v
		}
		tok := post(s.URL()+"/tokenize", req).json()
		return post(s.URL()+"/detokenize", map[string]any{"tokens": tok["tokens"]}).json()["prompt"].(string)
	}

	It("keeps earlier reasoning on the plain template and ends with the plain generation prompt", func() {
		p := promptText(startFake(vllm.Options{}), nil)
		Expect(p).To(ContainSubstring("SECRET-THOUGHT"))
		Expect(p).To(HaveSuffix("<|im_start|>assistant\n"))
	})

	It("drops earlier turns' reasoning on the thinking variant and opens <think>", func() {
		p := promptText(startFake(vllm.Options{ChatTemplateVariant: "thinking"}), nil)
		Expect(p).NotTo(ContainSubstring("SECRET-THOUGHT"))
		Expect(p).To(HaveSuffix("<|im_start|>assistant\n<think>\n"))
	})

	It("omits the generation prompt when add_generation_prompt is false", func() {
		p := promptText(startFake(vllm.Options{}), map[string]any{"add_generation_prompt": false})
		Expect(p).To(HaveSuffix("again<|im_end|>\n"))
	})
})

var _ = Describe("plain and structured messages render alike", func() {
	var s *vllm.Server
	BeforeEach(func() { s = startFake(vllm.Options{}) })

	DescribeTable("a chat completion's prompt ids equal /tokenize's for the same messages",
		func(msgs []any) {
			chat := post(s.URL()+"/v1/chat/completions", map[string]any{"model": vllm.DefaultModel, "messages": msgs, "max_tokens": 2, "return_token_ids": true})
			Expect(chat.status).To(Equal(http.StatusOK), string(chat.body))
			tok := post(s.URL()+"/tokenize", map[string]any{"model": vllm.DefaultModel, "messages": msgs})
			Expect(tok.status).To(Equal(http.StatusOK), string(tok.body))
			Expect(toInts(chat.json()["prompt_token_ids"])).To(Equal(toInts(tok.json()["tokens"])))
		},
		Entry("plain turns", []any{
			map[string]any{"role": "system", "content": "Be terse."},
			map[string]any{"role": "user", "content": "hi"},
			map[string]any{"role": "assistant", "content": "hello"},
			map[string]any{"role": "user", "content": "more \"quoted\" \u00e9 \\ text"}}),
		Entry("tool results", []any{
			map[string]any{"role": "user", "content": "run it"},
			map[string]any{"role": "tool", "content": "out 1", "tool_call_id": "c1"},
			map[string]any{"role": "tool", "content": "out 2", "tool_call_id": "c2"}}),
		Entry("an assistant turn with reasoning, after the last query (not plain)", []any{
			map[string]any{"role": "user", "content": "q"},
			map[string]any{"role": "assistant", "content": "a", "reasoning_content": "thought"},
			map[string]any{"role": "tool", "content": "r", "tool_call_id": "c1"}}),
		Entry("an assistant turn with tool calls (not plain)", []any{
			map[string]any{"role": "user", "content": "q"},
			map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": "c1", "type": "function",
				"function": map[string]any{"name": "f", "arguments": `{"b":1,"a":2}`}}}},
			map[string]any{"role": "tool", "content": "r", "tool_call_id": "c1"}}),
		Entry("content parts and null content (not plain)", []any{
			map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "a"}, map[string]any{"type": "text", "text": "b"}}},
			map[string]any{"role": "assistant", "content": nil},
			map[string]any{"role": "user", "content": "c"}}),
	)

	It("refuses an unknown role with the same message either way", func() {
		msgs := []any{map[string]any{"role": "robot", "content": "x"}}
		chat := post(s.URL()+"/v1/chat/completions", map[string]any{"model": vllm.DefaultModel, "messages": msgs})
		tok := post(s.URL()+"/tokenize", map[string]any{"model": vllm.DefaultModel, "messages": msgs})
		Expect(chat.status).To(Equal(http.StatusBadRequest))
		Expect(chat.json()["error"].(map[string]any)["message"]).To(Equal(tok.json()["error"].(map[string]any)["message"]))
	})
})
