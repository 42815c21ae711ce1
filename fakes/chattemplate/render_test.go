package chattemplate_test

import (
	"encoding/json"
	"errors"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/chattemplate"
)

type msg = chattemplate.Message

// toolsHeader is the fixed text of Qwen3's tool block around the tool lines.
const (
	toolsIntro = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>"
	toolsOutro = "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n"
)

func weatherTool() map[string]any {
	return map[string]any{
		"type": "function",
		"function": map[string]any{
			"name":        "get_weather",
			"description": "Get weather",
			"parameters": map[string]any{
				"type":       "object",
				"properties": map[string]any{"city": map[string]any{"type": "string"}},
				"required":   []any{"city"},
			},
		},
	}
}

func weatherCall(args any) map[string]any {
	return map[string]any{"id": "chatcmpl-tool-1", "type": "function",
		"function": map[string]any{"name": "get_weather", "arguments": args}}
}

var _ = Describe("Render", func() {
	qwen3 := chattemplate.Qwen3()
	thinking := chattemplate.Qwen3Thinking2507()

	render := func(t *chattemplate.Template, req chattemplate.Request) string {
		GinkgoHelper()
		out, err := t.Render(req)
		Expect(err).NotTo(HaveOccurred())
		return out
	}

	It("renders system and user turns with each variant's generation prompt", func() {
		req := chattemplate.Request{Messages: []msg{
			{"role": "system", "content": "You are helpful."},
			{"role": "user", "content": "Hi"},
		}, AddGenerationPrompt: true}
		base := "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
		Expect(render(qwen3, req)).To(Equal(base + "<|im_start|>assistant\n"))
		Expect(render(thinking, req)).To(Equal(base + "<|im_start|>assistant\n<think>\n"))
		req.AddGenerationPrompt = false
		Expect(render(thinking, req)).To(Equal(base))
	})

	It("puts tools into the system turn as Python-style JSON lines", func() {
		req := chattemplate.Request{
			Messages: []msg{
				{"role": "system", "content": "You are helpful."},
				{"role": "user", "content": "Weather in Paris?"},
			},
			Tools:               []map[string]any{weatherTool()},
			AddGenerationPrompt: true,
		}
		tool := `{"type": "function", "function": {"name": "get_weather", "description": "Get weather", "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"], "type": "object"}}}`
		Expect(render(qwen3, req)).To(Equal("<|im_start|>system\nYou are helpful.\n\n" + toolsIntro + "\n" + tool + toolsOutro +
			"<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"))
	})

	It("keeps key order of raw JSON tool schemas, renders a missing description as null and needs no system message", func() {
		req := chattemplate.Request{
			Messages: []msg{{"role": "user", "content": "hi"}},
			Tools: []map[string]any{{"type": "function", "function": map[string]any{
				"name":       "ls",
				"parameters": json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"Verzeichnis – ünïcode"}},"required":["path"]}`),
			}}},
		}
		tool := `{"type": "function", "function": {"name": "ls", "description": null, "parameters": {"type": "object", "properties": {"path": {"type": "string", "description": "Verzeichnis – ünïcode"}}, "required": ["path"]}}}`
		Expect(render(thinking, req)).To(Equal("<|im_start|>system\n" + toolsIntro + "\n" + tool + toolsOutro + "<|im_start|>user\nhi<|im_end|>\n"))
	})

	It("renders tool calls as hermes blocks and groups tool results into one user turn", func() {
		req := chattemplate.Request{Messages: []msg{
			{"role": "user", "content": "Weather in Paris?"},
			{"role": "assistant", "content": "", "reasoning": "Need weather.\n",
				"tool_calls": []any{weatherCall(`{"city":"Paris"}`), weatherCall(map[string]any{"city": "Lyon"})}},
			{"role": "tool", "tool_call_id": "chatcmpl-tool-1", "content": "18C"},
			{"role": "tool", "tool_call_id": "chatcmpl-tool-2", "content": []any{map[string]any{"type": "text", "text": "sunny"}}},
		}, AddGenerationPrompt: true}
		calls := "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n" +
			"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}}\n</tool_call><|im_end|>\n"
		results := "<|im_start|>user\n<tool_response>\n18C\n</tool_response>\n<tool_response>\nsunny\n</tool_response><|im_end|>\n"
		Expect(render(thinking, req)).To(Equal("<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
			"<|im_start|>assistant\n<think>\nNeed weather.\n</think>\n\n" + calls + results + "<|im_start|>assistant\n<think>\n"))
		Expect(render(qwen3, req)).To(Equal("<|im_start|>user\nWeather in Paris?<|im_end|>\n" +
			"<|im_start|>assistant\n<think>\nNeed weather.\n</think>\n\n" + calls + results + "<|im_start|>assistant\n"))
	})

	It("separates content from the first tool call with a newline", func() {
		req := chattemplate.Request{Messages: []msg{
			{"role": "user", "content": "go"},
			{"role": "assistant", "content": "I'll check.", "tool_calls": []any{weatherCall(`{}`)}},
		}}
		Expect(render(qwen3, req)).To(HaveSuffix("<|im_start|>assistant\nI'll check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call><|im_end|>\n"))
	})

	It("drops the reasoning of turns before the last user query only in the thinking variant", func() {
		req := chattemplate.Request{Messages: []msg{
			{"role": "user", "content": "Q1"},
			{"role": "assistant", "content": "\n\nA1", "reasoning": "R1\n"},
			{"role": "user", "content": "Q2"},
		}, AddGenerationPrompt: true}
		Expect(render(thinking, req)).To(Equal("<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n\n\nA1<|im_end|>\n" +
			"<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\n"))
		Expect(render(qwen3, req)).To(Equal("<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\n<think>\nR1\n</think>\n\nA1<|im_end|>\n" +
			"<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n"))
	})

	It("takes reasoning from <think> tags in content when no reasoning field is given", func() {
		req := chattemplate.Request{Messages: []msg{
			{"role": "user", "content": "Q1"},
			{"role": "assistant", "content": "<think>\nold R\n</think>\n\nold A"},
			{"role": "user", "content": "Q2"},
			{"role": "assistant", "content": "<think>\nnew R\n\n</think>\n\nnew A"},
		}}
		Expect(render(thinking, req)).To(Equal("<|im_start|>user\nQ1<|im_end|>\n<|im_start|>assistant\nold A<|im_end|>\n" +
			"<|im_start|>user\nQ2<|im_end|>\n<|im_start|>assistant\n<think>\nnew R\n</think>\n\nnew A<|im_end|>\n"))
	})

	It("renders an in-loop assistant turn without reasoning as plain content unless it is the last message", func() {
		req := chattemplate.Request{Messages: []msg{
			{"role": "user", "content": "Q"},
			{"role": "assistant", "content": "A1"},
			{"role": "tool", "content": "r"},
			{"role": "assistant", "content": "A2"},
		}}
		Expect(render(thinking, req)).To(Equal("<|im_start|>user\nQ<|im_end|>\n<|im_start|>assistant\nA1<|im_end|>\n" +
			"<|im_start|>user\n<tool_response>\nr\n</tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nA2<|im_end|>\n"))
	})

	It("does not treat a user message that wraps a tool response as the last query", func() {
		req := chattemplate.Request{Messages: []msg{
			{"role": "user", "content": "Q"},
			{"role": "assistant", "content": "A", "reasoning": "R"},
			{"role": "user", "content": "<tool_response>\nx\n</tool_response>"},
		}}
		Expect(render(thinking, req)).To(ContainSubstring("<think>\nR\n</think>\n\nA"))
	})

	It("joins text parts with newlines and renders non-first system messages as turns", func() {
		req := chattemplate.Request{Messages: []msg{
			{"role": "user", "content": []any{map[string]any{"type": "text", "text": "a"}, map[string]any{"type": "text", "text": "b"}}},
			{"role": "system", "content": "late system"},
		}}
		Expect(render(qwen3, req)).To(Equal("<|im_start|>user\na\nb<|im_end|>\n<|im_start|>system\nlate system<|im_end|>\n"))
	})

	renderArgs := func(t *chattemplate.Template, args any) (string, error) {
		return t.Render(chattemplate.Request{Messages: []msg{
			{"role": "user", "content": "go"},
			{"role": "assistant", "content": nil, "tool_calls": []any{weatherCall(args)}},
		}})
	}

	DescribeTable("re-serialises tool-call arguments as vLLM's json.loads + tojson does",
		func(args any, want string) {
			for _, t := range []*chattemplate.Template{qwen3, qwen3.CoerceBadArguments()} {
				out, err := renderArgs(t, args)
				Expect(err).NotTo(HaveOccurred())
				Expect(out).To(ContainSubstring(`"arguments": ` + want + "}\n</tool_call>"))
			}
		},
		Entry("compact string gets Python spacing", `{"city":"Paris","days":3}`, `{"city": "Paris", "days": 3}`),
		Entry("key order of the string is kept", `{"z":1,"a":2}`, `{"z": 1, "a": 2}`),
		Entry("non-ASCII stays raw, escapes are Python's", `{"s":"é\u00e9\n\u0001\"\\/\ud83d\ude00"}`, `{"s": "éé\n\u0001\"\\/😀"}`),
		Entry("floats print as Python repr", `{"a":1.50,"b":1e20,"c":0.0001,"d":1e-5,"e":-0.0,"f":-0,"g":12345678901234567890}`,
			`{"a": 1.5, "b": 1e+20, "c": 0.0001, "d": 1e-05, "e": -0.0, "f": 0, "g": 12345678901234567890}`),
		Entry("nested arrays and objects", ` {"l":[1,{"k":[true,false,null]}],"o":{}} `, `{"l": [1, {"k": [true, false, null]}], "o": {}}`),
		Entry("empty string is {}", ``, `{}`),
		Entry("null is {}", nil, `{}`),
		Entry("an object value is dumped with sorted keys", map[string]any{"b": 1.0, "a": "x"}, `{"a": "x", "b": 1}`),
		Entry("raw JSON text keeps its order", json.RawMessage(`{"z":1,"a":[2]}`), `{"z": 1, "a": [2]}`),
		Entry("a raw JSON string holding JSON", json.RawMessage(`"{\"q\":1}"`), `{"q": 1}`),
	)

	DescribeTable("by default rejects arguments json.loads cannot parse",
		func(args any, fragment string) {
			out, err := renderArgs(qwen3, args)
			Expect(out).To(BeEmpty())
			var te *chattemplate.Error
			Expect(errors.As(err, &te)).To(BeTrue())
			Expect(te.Param).To(Equal("tool_calls"))
			Expect(err.Error()).To(ContainSubstring("messages[1].tool_calls[0].function.arguments"))
			Expect(err.Error()).To(ContainSubstring(fragment))
		},
		Entry("truncated JSON", `{"city": "Par`, "not valid JSON"),
		Entry("trailing data", `{"a":1} x`, "extra data"),
		Entry("leading zero", `{"a":01}`, "not valid JSON"),
		Entry("raw control character", "{\"a\":\"x\ny\"}", "control character"),
		Entry("a number instead of a string", 42.0, "must be a JSON string or an object"),
	)

	DescribeTable("keeps valid non-object JSON by default and coerces it to {} when asked",
		func(args any, strict string) {
			out, err := renderArgs(qwen3, args)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring(`"arguments": ` + strict + "}"))
			out, err = renderArgs(qwen3.CoerceBadArguments(), args)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring(`"arguments": {}}`))
		},
		Entry("an array string", `[1,2]`, `[1, 2]`),
		Entry("a number string", `42`, `42`),
		Entry("a list value", []any{"a"}, `["a"]`),
	)

	It("coerces unparseable arguments to {} when asked, as recent vLLM does", func() {
		for _, args := range []any{`{"city": "Par`, 42.0, true, `nope`} {
			out, err := renderArgs(qwen3.CoerceBadArguments(), args)
			Expect(err).NotTo(HaveOccurred())
			Expect(out).To(ContainSubstring(`"arguments": {}}`))
		}
		Expect(qwen3.CoerceBadArguments().Name()).To(Equal(qwen3.Name()))
	})

	DescribeTable("rejects malformed requests with a clear error",
		func(req chattemplate.Request, param, fragment string) {
			out, err := qwen3.Render(req)
			Expect(err).To(HaveOccurred())
			Expect(out).To(BeEmpty())
			Expect(errors.Is(err, chattemplate.ErrInvalidRequest)).To(BeTrue())
			var te *chattemplate.Error
			Expect(errors.As(err, &te)).To(BeTrue())
			Expect(te.Param).To(Equal(param))
			Expect(err.Error()).To(ContainSubstring(fragment))
		},
		Entry("no messages", chattemplate.Request{AddGenerationPrompt: true}, "messages", "messages must not be empty"),
		Entry("unknown role", chattemplate.Request{Messages: []msg{{"role": "wizard", "content": "x"}}}, "messages", `unknown role "wizard"`),
		Entry("missing role", chattemplate.Request{Messages: []msg{{"content": "x"}}}, "messages", "missing field 'role'"),
		Entry("role not a string", chattemplate.Request{Messages: []msg{{"role": 3.0, "content": "x"}}}, "messages", "role must be a string"),
		Entry("nil message", chattemplate.Request{Messages: []msg{nil}}, "messages", "must be an object"),
		Entry("content a number", chattemplate.Request{Messages: []msg{{"role": "user", "content": 5.0}}}, "messages", "content"),
		Entry("image part", chattemplate.Request{Messages: []msg{{"role": "user", "content": []any{map[string]any{"type": "image_url"}}}}}, "messages", `unsupported content part type "image_url"`),
		Entry("text part without text", chattemplate.Request{Messages: []msg{{"role": "user", "content": []any{map[string]any{"type": "text"}}}}}, "messages", "'text' must be a string"),
		Entry("reasoning not a string", chattemplate.Request{Messages: []msg{{"role": "assistant", "content": "a", "reasoning": 1.0}}}, "messages", "reasoning must be a string"),
		Entry("tool_calls not a list", chattemplate.Request{Messages: []msg{{"role": "assistant", "tool_calls": "x"}}}, "tool_calls", "must be a list"),
		Entry("tool call not an object", chattemplate.Request{Messages: []msg{{"role": "assistant", "tool_calls": []any{"x"}}}}, "tool_calls", "assistant tool_calls entries must be objects."),
		Entry("tool call of another type", chattemplate.Request{Messages: []msg{{"role": "assistant", "tool_calls": []any{map[string]any{"type": "custom", "function": map[string]any{"name": "f"}}}}}}, "tool_calls", "only support assistant tool_calls of type 'function'."),
		Entry("tool call without function", chattemplate.Request{Messages: []msg{{"role": "assistant", "tool_calls": []any{map[string]any{"type": "function"}}}}}, "tool_calls", "of type 'function'"),
		Entry("tool call without name", chattemplate.Request{Messages: []msg{{"role": "assistant", "tool_calls": []any{map[string]any{"function": map[string]any{"arguments": "{}"}}}}}}, "tool_calls", "function.name must be a string"),
		Entry("tool without function", chattemplate.Request{Messages: []msg{{"role": "user", "content": "x"}}, Tools: []map[string]any{{"type": "function"}}}, "tools", "tools[0].function must be an object"),
		Entry("tool of another type", chattemplate.Request{Messages: []msg{{"role": "user", "content": "x"}}, Tools: []map[string]any{{"type": "retrieval", "function": map[string]any{"name": "f"}}}}, "tools", `tools[0].type must be "function"`),
		Entry("tool description not a string", chattemplate.Request{Messages: []msg{{"role": "user", "content": "x"}}, Tools: []map[string]any{{"type": "function", "function": map[string]any{"name": "f", "description": 3.0}}}}, "tools", "description must be a string"),
		Entry("tool parameters not an object", chattemplate.Request{Messages: []msg{{"role": "user", "content": "x"}}, Tools: []map[string]any{{"type": "function", "function": map[string]any{"name": "f", "parameters": "x"}}}}, "tools", "parameters must be an object"),
		Entry("tool without name", chattemplate.Request{Messages: []msg{{"role": "user", "content": "x"}}, Tools: []map[string]any{{"type": "function", "function": map[string]any{}}}}, "tools", "tools[0].function.name must be a string"),
	)

	It("renders Go-map tools deterministically", func() {
		req := chattemplate.Request{Messages: []msg{{"role": "user", "content": "x"}}, Tools: []map[string]any{weatherTool(), weatherTool()}}
		first := render(qwen3, req)
		for range 20 {
			Expect(render(qwen3, req)).To(Equal(first))
		}
	})
})

var _ = Describe("ByName", func() {
	DescribeTable("resolves template and model names",
		func(name, want string) {
			t, err := chattemplate.ByName(name)
			Expect(err).NotTo(HaveOccurred())
			Expect(t.Name()).To(Equal(want))
		},
		Entry(nil, "qwen3", chattemplate.NameQwen3),
		Entry(nil, "qwen3-thinking-2507", chattemplate.NameQwen3Thinking2507),
		Entry(nil, "Qwen/Qwen3-4B-Thinking-2507", chattemplate.NameQwen3Thinking2507),
		Entry(nil, "Qwen3-4B-Instruct-2507", chattemplate.NameQwen3),
		Entry(nil, " QWEN3 ", chattemplate.NameQwen3),
	)

	It("names the known templates when it does not know one", func() {
		_, err := chattemplate.ByName("llama3")
		Expect(errors.Is(err, chattemplate.ErrUnknownTemplate)).To(BeTrue())
		Expect(err.Error()).To(ContainSubstring("qwen3-thinking-2507"))
	})
})
