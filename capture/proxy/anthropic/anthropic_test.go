package anthropic_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy/anthropic"
)

func decode(s string) map[string]any {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	ExpectWithOffset(1, dec.Decode(&m)).To(Succeed())
	return m
}

var _ = Describe("ToChat", func() {
	It("maps system, tool results, thinking and tool_use as vLLM does", func() {
		out, err := anthropic.ToChat(decode(`{
			"model":"claude-x","max_tokens":100,"stop_sequences":["END"],"temperature":0.5,"top_k":5,
			"system":[{"type":"text","text":"x-anthropic-billing-header: cc"},{"type":"text","text":"You are "},{"type":"text","text":"helpful."}],
			"tools":[{"name":"Bash","description":"run","input_schema":{"type":"object"}},{"name":"Bare"}],
			"tool_choice":{"type":"any","disable_parallel_tool_use":true},
			"messages":[
				{"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
				{"role":"system","content":"env info","output_config":{"effort":"high"}},
				{"role":"assistant","content":[{"type":"thinking","thinking":"hm","signature":"s"},{"type":"text","text":"ok"},
					{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls","b":"é"}}]},
				{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"l1"},{"type":"text","text":"l2"}]},{"type":"text","text":"next"}]},
				{"role":"system","content":[]}
			]}`))
		Expect(err).NotTo(HaveOccurred())
		b, _ := json.Marshal(out)
		Expect(decode(string(b))).To(Equal(decode(`{
			"model":"claude-x","max_tokens":100,"stop":["END"],"temperature":0.5,"top_k":5,
			"tool_choice":"required","parallel_tool_calls":false,
			"tools":[{"type":"function","function":{"name":"Bash","description":"run","parameters":{"type":"object"}}},
			         {"type":"function","function":{"name":"Bare","parameters":{"type":"object","properties":{}}}}],
			"messages":[
				{"role":"system","content":"You are helpful.\n\nenv info"},
				{"role":"user","content":"a\nb"},
				{"role":"assistant","content":"ok","reasoning":"hm","tool_calls":[{"id":"t1","type":"function",
					"function":{"name":"Bash","arguments":"{\"b\": \"é\", \"command\": \"ls\"}"}}]},
				{"role":"tool","tool_call_id":"t1","content":"l1\nl2"},
				{"role":"user","content":"next"}
			]}`)))
	})

	DescribeTable("tool_choice",
		func(choice string, want any) {
			out, err := anthropic.ToChat(decode(`{"messages":[],"tools":[{"name":"f"}],"tool_choice":` + choice + `}`))
			Expect(err).NotTo(HaveOccurred())
			b, _ := json.Marshal(out["tool_choice"])
			w, _ := json.Marshal(want)
			Expect(b).To(MatchJSON(w))
		},
		Entry("auto", `{"type":"auto"}`, "auto"),
		Entry("none", `{"type":"none"}`, "none"),
		Entry("named", `{"type":"tool","name":"f"}`, map[string]any{"type": "function", "function": map[string]any{"name": "f"}}),
	)

	DescribeTable("rejects bodies it cannot translate with a clear error",
		func(body, want string) {
			_, err := anthropic.ToChat(decode(body))
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("no messages", `{"model":"m"}`, "messages: field required"),
		Entry("unknown role", `{"messages":[{"role":"robot","content":"x"}]}`, `unsupported role "robot"`),
		Entry("non-object block", `{"messages":[{"role":"user","content":[1]}]}`, "content[0]: not an object"),
		Entry("bad system", `{"system":5,"messages":[]}`, "system: expected a string"),
		Entry("unknown tool_choice", `{"messages":[],"tool_choice":{"type":"maybe"}}`, "tool_choice: unsupported type"),
		Entry("tool without name", `{"messages":[],"tools":[{}]}`, "tools[0]: name is required"),
		Entry("unknown user block", `{"messages":[{"role":"user","content":[{"type":"text","text":"a"},{"type":"document","source":{}}]}]}`,
			`messages[0]: content[1]: user content blocks of type document are not supported`),
		Entry("unknown assistant block", `{"messages":[{"role":"assistant","content":[{"type":"server_tool_use","id":"x"}]}]}`,
			`messages[0]: content[0]: assistant content blocks of type server_tool_use are not supported`),
		Entry("block without type", `{"messages":[{"role":"user","content":[{"text":"a"}]}]}`, `content[0]: a content block needs a "type"`),
	)

	It("keeps the client's key order of tool inputs and schemas when it has their bytes", func() {
		body := decode(`{"messages":[{"role":"assistant","content":[{"type":"text","text":"ok"},
			{"type":"tool_use","id":"t1","name":"Write","input":{"file_path":"/a","content":"x"}}]}],
			"tools":[{"name":"Write","input_schema":{"type":"object","properties":{"file_path":{},"content":{}}}}]}`)
		out, err := anthropic.ToChatRaw(body, &anthropic.Raw{
			ToolInputs:  map[[2]int]json.RawMessage{{0, 1}: json.RawMessage(`{"file_path":"/a","content":"x","n":1.0}`)},
			ToolSchemas: map[int]json.RawMessage{0: json.RawMessage(`{"type":"object","properties":{"file_path":{},"content":{}}}`)},
		})
		Expect(err).NotTo(HaveOccurred())
		call := out["messages"].([]any)[0].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
		Expect(call["function"].(map[string]any)["arguments"]).To(Equal(`{"file_path": "/a", "content": "x", "n": 1.0}`))
		fn := out["tools"].([]any)[0].(map[string]any)["function"].(map[string]any)
		Expect(fn["parameters"]).To(Equal(json.RawMessage(`{"type":"object","properties":{"file_path":{},"content":{}}}`)))
	})
})

var _ = Describe("FromChat", func() {
	DescribeTable("stop reasons",
		func(finish, stopReason string, calls bool, want string, wantSeq any) {
			msg := `{"role":"assistant","content":"x"}`
			if calls {
				msg = `{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]}`
			}
			sr := `null`
			if stopReason != "" {
				sr = `"` + stopReason + `"`
			}
			out, err := anthropic.FromChat(decode(`{"model":"m","choices":[{"index":0,"message":`+msg+`,"finish_reason":"`+finish+`","stop_reason":`+sr+`}],
				"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}`), "resp_1", []string{"END"})
			Expect(err).NotTo(HaveOccurred())
			Expect(out["stop_reason"]).To(Equal(want))
			if wantSeq == nil {
				Expect(out["stop_sequence"]).To(BeNil())
			} else {
				Expect(out["stop_sequence"]).To(Equal(wantSeq))
			}
			Expect(out["id"]).To(Equal("resp_1"))
		},
		Entry("stop", "stop", "", false, "end_turn", nil),
		Entry("length", "length", "", false, "max_tokens", nil),
		Entry("tool calls", "tool_calls", "", true, "tool_use", nil),
		Entry("named tool keeps stop", "stop", "", true, "tool_use", nil),
		Entry("matched stop sequence", "stop", "END", false, "stop_sequence", "END"),
	)

	It("builds thinking, text and tool_use blocks, and an empty text block for an empty reply", func() {
		out, err := anthropic.FromChat(decode(`{"model":"m","choices":[{"message":{"role":"assistant","reasoning":"r","content":"t",
			"tool_calls":[{"id":"c1","function":{"name":"f","arguments":"{\"a\": 1}"}}]},"finish_reason":"tool_calls"}]}`), "id", nil)
		Expect(err).NotTo(HaveOccurred())
		var types []string
		for _, b := range out["content"].([]any) {
			types = append(types, b.(map[string]any)["type"].(string))
		}
		Expect(types).To(Equal([]string{"thinking", "text", "tool_use"}))
		Expect(out["content"].([]any)[2].(map[string]any)["input"]).To(Equal(json.RawMessage(`{"a": 1}`)))

		out, err = anthropic.FromChat(decode(`{"choices":[{"message":{"role":"assistant","content":null},"finish_reason":"stop"}]}`), "id", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(out["content"]).To(Equal([]any{map[string]any{"type": "text", "text": ""}}))

		_, err = anthropic.FromChat(decode(`{"choices":[]}`), "id", nil)
		Expect(err).To(MatchError(ContainSubstring("no choices")))
	})
})

var _ = Describe("WriteSSE", func() {
	It("emits the event order Claude Code accepted", func() {
		msg := map[string]any{"id": "resp_1", "model": "m", "stop_reason": "tool_use", "stop_sequence": nil,
			"usage": map[string]any{"input_tokens": 3, "output_tokens": 4},
			"content": []any{
				map[string]any{"type": "thinking", "thinking": "r", "signature": "sig"},
				map[string]any{"type": "text", "text": strings.Repeat("é", 300)},
				map[string]any{"type": "tool_use", "id": "c1", "name": "f", "input": map[string]any{"a": 1}},
			}}
		var buf bytes.Buffer
		w := bufio.NewWriter(&buf)
		Expect(anthropic.WriteSSE(w, msg)).To(Succeed())
		Expect(w.Flush()).To(Succeed())
		var names []string
		var text, partial string
		for frame := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n\n") {
			lines := strings.SplitN(frame, "\n", 2)
			name := strings.TrimPrefix(lines[0], "event: ")
			names = append(names, name)
			var d map[string]any
			Expect(json.Unmarshal([]byte(strings.TrimPrefix(lines[1], "data: ")), &d)).To(Succeed())
			Expect(d["type"]).To(Equal(name))
			if delta, ok := d["delta"].(map[string]any); ok {
				if s, ok := delta["text"].(string); ok {
					text += s
				}
				if s, ok := delta["partial_json"].(string); ok {
					partial += s
				}
			}
		}
		Expect(names).To(Equal([]string{"message_start",
			"content_block_start", "ping", "content_block_delta", "content_block_delta", "content_block_stop",
			"content_block_start", "content_block_delta", "content_block_delta", "content_block_delta", "content_block_stop",
			"content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
			"message_delta", "message_stop"}))
		Expect(text).To(Equal(strings.Repeat("é", 300)))
		Expect(partial).To(MatchJSON(`{"a":1}`))
	})
})

var _ = Describe("ErrorBody", func() {
	DescribeTable("types by status",
		func(status int, want string) {
			Expect(anthropic.ErrorBody(status, "m")).To(Equal(map[string]any{"type": "error",
				"error": map[string]any{"type": want, "message": "m"}}))
		},
		Entry("400", 400, "invalid_request_error"),
		Entry("401", 401, "authentication_error"),
		Entry("404", 404, "not_found_error"),
		Entry("413", 413, "request_too_large"),
		Entry("429", 429, "rate_limit_error"),
		Entry("500", 500, "api_error"),
		Entry("529", 529, "overloaded_error"),
	)
})
