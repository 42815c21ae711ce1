package chattemplate_test

import (
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/chattemplate"
	"github.com/capbench/capbench/fakes/tokenizer"
)

// turnPlan is one model call of a scripted conversation: what the model
// generates and what the harness appends after echoing the assistant turn.
type turnPlan struct {
	content, reasoning string
	calls              []chattemplate.ToolCall
	next               []msg // tool results or a new user message
}

// echo builds the assistant message a harness sends back, the way vLLM's
// reasoning and hermes parsers return the generation: reasoning keeps its
// trailing newline, content keeps its leading newlines, whitespace-only
// content before tool calls becomes null.
func echo(t turnPlan) msg {
	m := msg{"role": "assistant", "reasoning": t.reasoning + "\n"}
	switch {
	case t.content == "" && len(t.calls) > 0:
		m["content"] = nil
	default:
		m["content"] = "\n\n" + t.content
	}
	if len(t.calls) > 0 {
		var calls []any
		for _, c := range t.calls {
			calls = append(calls, map[string]any{"id": "chatcmpl-tool-x", "type": "function",
				"function": map[string]any{"name": c.Name, "arguments": c.Arguments}})
		}
		m["tool_calls"] = calls
	}
	return m
}

func toolMsg(content string) msg { return msg{"role": "tool", "tool_call_id": "x", "content": content} }
func userMsg(content string) msg { return msg{"role": "user", "content": content} }

var _ = Describe("prompt chaining", func() {
	tok := tokenizer.New()
	tools := []map[string]any{weatherTool()}

	// chainHolds reports, per call after the first, whether the new prompt's
	// tokens start with the previous prompt's tokens + generation + EOS.
	run := func(t *chattemplate.Template, plan []turnPlan) []bool {
		GinkgoHelper()
		history := []msg{{"role": "system", "content": "Be brief."}, userMsg("Weather in Paris and Lyon?")}
		var holds []bool
		for _, step := range plan {
			prompt, err := t.Render(chattemplate.Request{Messages: history, Tools: tools, AddGenerationPrompt: true})
			Expect(err).NotTo(HaveOccurred())
			gen := t.RenderAssistantGeneration(step.content, step.reasoning, step.calls)
			want := append(append(tok.Encode(prompt), tok.Encode(gen)...), tok.EOSID())

			history = append(history, echo(step))
			history = append(history, step.next...)
			next, err := t.Render(chattemplate.Request{Messages: history, Tools: tools, AddGenerationPrompt: true})
			Expect(err).NotTo(HaveOccurred())
			got := tok.Encode(next)
			holds = append(holds, len(got) >= len(want) && slices.Equal(got[:len(want)], want))
		}
		return holds
	}

	toolLoop := []turnPlan{
		{reasoning: "I need the weather for Paris.", calls: []chattemplate.ToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}},
			next: []msg{toolMsg("18C, sunny")}},
		{reasoning: "Now Lyon.", content: "Checking Lyon too.", calls: []chattemplate.ToolCall{{Name: "get_weather", Arguments: `{"city":"Lyon"}`}},
			next: []msg{toolMsg("15C")}},
		{reasoning: "Both known.\nAnswer.", content: "Paris 18C, Lyon 15C.", next: []msg{userMsg("And Nice?")}},
		{reasoning: "Nice now.", calls: []chattemplate.ToolCall{{Name: "get_weather", Arguments: `{"city": "Nice", "unit": "C"}`}},
			next: []msg{toolMsg("20C"), toolMsg("windy")}},
		{reasoning: "Done.", content: "Nice 20C, windy.", next: []msg{userMsg("Thanks!")}},
	}

	It("chains cleanly at every call with the plain Qwen3 template", func() {
		Expect(run(chattemplate.Qwen3(), toolLoop)).To(Equal([]bool{true, true, true, true, true}))
	})

	It("chains inside a tool loop but breaks after a new user message with the Thinking-2507 template", func() {
		// Calls 1, 2 and 4 are followed by tool results; calls 3 and 5 by a
		// new user query, which drops the earlier turns' reasoning.
		Expect(run(chattemplate.Qwen3Thinking2507(), toolLoop)).To(Equal([]bool{true, true, false, true, false}))
	})

	It("writes the generation the same way the plain template renders the turn", func() {
		t := chattemplate.Qwen3()
		calls := []chattemplate.ToolCall{{Name: "f", Arguments: `{"a":1}`}}
		gen := t.RenderAssistantGeneration("hi", "why", calls)
		prompt, err := t.Render(chattemplate.Request{Messages: []msg{
			userMsg("q"),
			{"role": "assistant", "content": "hi", "reasoning": "why", "tool_calls": []any{map[string]any{"function": map[string]any{"name": "f", "arguments": `{"a":1}`}}}},
		}})
		Expect(err).NotTo(HaveOccurred())
		Expect(prompt).To(HaveSuffix("<|im_start|>assistant\n" + gen + "<|im_end|>\n"))
		Expect(gen).To(Equal("<think>\nwhy\n</think>\n\nhi\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call>"))
		Expect(t.RenderAssistantGeneration("just text", "", nil)).To(Equal("just text"))
	})

	It("starts the Thinking-2507 generation after the prompt's <think>", func() {
		t := chattemplate.Qwen3Thinking2507()
		Expect(t.RenderAssistantGeneration("\n\nAnswer", "Reason\n", nil)).To(Equal("Reason\n</think>\n\nAnswer"))
		Expect(t.RenderAssistantGeneration("", "R", []chattemplate.ToolCall{{Name: "f", Arguments: "not json"}})).
			To(Equal("R\n</think>\n\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>"))
		Expect(t.GenerationPrompt()).To(HaveSuffix("<think>\n"))
	})
})
