package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"go.uber.org/goleak"

	"github.com/capbench/capbench/scenarios/agent"
)

// stub is a scripted model server that records what the agents send.
type stub struct {
	mu       sync.Mutex
	requests []*recorded
	answer   func(w http.ResponseWriter, r *recorded, n int)
}

type recorded struct {
	Method, Path, Query string
	Header              http.Header
	Body                []byte
	JSON                map[string]any
}

func (s *stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rec := &recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: b}
	_ = json.Unmarshal(b, &rec.JSON)
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	n := len(s.requests)
	s.mu.Unlock()
	s.answer(w, rec, n)
}

func sse(w http.ResponseWriter, frames ...string) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, f := range frames {
		fmt.Fprint(w, f)
	}
}

func anthropicToolUse(id string) []string {
	return []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"" + id + "\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[]}}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"Bash\",\"input\":{}}}\n\n",
		"event: ping\ndata: {\"type\":\"ping\"}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\": \\\"echo\"}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\" hi\\\"}\"}}\n\n",
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\"}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	}
}

func anthropicText(id, text string) []string {
	return []string{
		"event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"" + id + "\"}}\n\n",
		"event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"" + text + "\"}}\n\n",
		"event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"}}\n\n",
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
	}
}

func chatToolCallStream(id string) []string {
	return []string{
		`data: {"id":"` + id + `","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n",
		`data: {"id":"` + id + `","choices":[{"index":0,"delta":{"content":null,"tool_calls":[{"id":"call_1","type":"function","index":0,"function":{"name":"bash"}}]}}]}` + "\n\n",
		`data: {"id":"` + id + `","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"cmd\": "}}]}}]}` + "\n\n",
		`data: {"id":"` + id + `","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}` + "\n\n",
		`data: {"id":"` + id + `","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n",
		"data: [DONE]\n\n",
	}
}

func chatText(w http.ResponseWriter, id, text string) {
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"finish_reason":"stop"}]}`, id, text)
}

func serve(s *stub) string {
	srv := httptest.NewServer(s)
	DeferCleanup(srv.Close)
	return srv.URL
}

var _ = Describe("the Claude-Code-like agent", func() {
	It("speaks Messages like the CLI and returns a finished record", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			if n == 1 {
				sse(w, anthropicToolUse("msg_1")...)
				return
			}
			sse(w, anthropicText("msg_2", "printed hi")...)
		}}
		base := serve(s)
		res, err := agent.Run(ctx, agent.ClaudeCode, agent.Target{BaseURL: base, RolloutID: "r1"},
			agent.Plan{Model: "pol", Main: agent.Conversation{Script: "s", Task: "run echo hi"}, Attribution: agent.Delivered, Reward: 1})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests).To(HaveLen(2))

		first, second := s.requests[0], s.requests[1]
		Expect(first.Path).To(Equal("/ng-rollout/r1/training-token-capture/v1/messages"))
		Expect(first.Query).To(Equal("beta=true"))
		Expect(first.Header.Get("anthropic-version")).To(Equal("2023-06-01"))
		Expect(first.Header.Get("x-api-key")).NotTo(BeEmpty())
		Expect(first.Header.Get("anthropic-beta")).To(HavePrefix("claude-code-20250219,"))
		Expect(first.Header.Get("X-Fake-Script")).To(Equal("s"))
		Expect(first.JSON).To(HaveKeyWithValue("max_tokens", BeNumerically("==", 32000)))
		Expect(first.JSON).To(HaveKeyWithValue("stream", true))
		Expect(first.JSON["system"]).To(HaveLen(3))
		Expect(string(first.Body)).To(HavePrefix(`{"model":"pol","messages":`), "the CLI's key order")
		Expect(string(first.Body)).To(ContainSubstring("<system-reminder>"), "no HTML escaping, like a JS client")

		msgs := second.JSON["messages"].([]any)
		roles := []string{}
		for _, m := range msgs {
			roles = append(roles, m.(map[string]any)["role"].(string))
		}
		Expect(roles).To(Equal([]string{"user", "system", "assistant", "user"}))
		Expect(msgs[1].(map[string]any)["content"]).To(BeAssignableToTypeOf(""), "the role:system message is a string after call 1")
		toolUse := msgs[2].(map[string]any)["content"].([]any)[0].(map[string]any)
		Expect(toolUse).To(Equal(map[string]any{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": map[string]any{"command": "echo hi"}}))
		Expect(strings.Count(string(second.Body), `"cache_control":{"type":"ephemeral"}}]},{`)).To(Equal(0))
		last := msgs[3].(map[string]any)["content"].([]any)[0].(map[string]any)
		Expect(last).To(HaveKeyWithValue("cache_control", map[string]any{"type": "ephemeral"}), "cache_control moves to the newest block")
		Expect(last).To(HaveKeyWithValue("tool_use_id", "toolu_1"))

		rec := res.Record
		Expect(rec).To(HaveKeyWithValue("_ng_rollout_id", "r1"))
		Expect(rec).To(HaveKeyWithValue("reward", BeNumerically("==", 1)))
		resp := rec["response"].(map[string]any)
		Expect(resp["id"]).To(Equal("msg_2"))
		out := resp["output"].([]any)
		Expect(out).To(HaveLen(4)) // user, function_call, function_call_output, final message
		Expect(out[1]).To(HaveKeyWithValue("type", "function_call"))
		Expect(out[1]).To(HaveKeyWithValue("arguments", `{"command":"echo hi"}`))
		Expect(out[2]).To(HaveKeyWithValue("output", "ok"))
		Expect(out[3]).To(HaveKeyWithValue("role", "assistant"))
	})

	// rolesOf lists a Messages request's roles and, for system entries, the
	// text of their first block (or their string content).
	rolesOf := func(r *recorded) ([]string, []string) {
		var roles, systemTexts []string
		for _, m := range r.JSON["messages"].([]any) {
			mm := m.(map[string]any)
			roles = append(roles, mm["role"].(string))
			if mm["role"] != "system" {
				continue
			}
			switch c := mm["content"].(type) {
			case string:
				systemTexts = append(systemTexts, c)
			case []any:
				systemTexts = append(systemTexts, c[0].(map[string]any)["text"].(string))
			}
		}
		return roles, systemTexts
	}
	toolThenText := func() *stub {
		return &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			if n == 1 {
				sse(w, anthropicToolUse("msg_1")...)
				return
			}
			sse(w, anthropicText("msg_2", "printed hi")...)
		}}
	}
	const agentList = "Available agent types: general-purpose, Explore."

	It("appends an inline system message after the first tool result, new in the next call", func(ctx SpecContext) {
		s := toolThenText()
		p := agent.Plan{Model: "pol", Main: agent.Conversation{Script: "s", Task: "run echo hi"}, Attribution: agent.Delivered,
			InlineSystem: &agent.InlineSystem{Text: agentList}}
		res, err := agent.Run(ctx, agent.ClaudeCode, agent.Target{BaseURL: serve(s), RolloutID: "r1"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests).To(HaveLen(2))

		roles, texts := rolesOf(s.requests[0])
		Expect(roles).To(Equal([]string{"user", "system"}), "not there before the tool result")
		Expect(texts).NotTo(ContainElement(agentList))

		roles, texts = rolesOf(s.requests[1])
		Expect(roles).To(Equal([]string{"user", "system", "assistant", "user", "system"}))
		Expect(texts[1]).To(Equal(agentList))
		msgs := s.requests[1].JSON["messages"].([]any)
		inline := msgs[4].(map[string]any)
		Expect(inline).To(HaveKeyWithValue("output_config", map[string]any{"effort": "high"}), "the CLI's per-message key")
		Expect(msgs[3].(map[string]any)["content"].([]any)[0]).To(HaveKeyWithValue("type", "tool_result"))
		Expect(res.Record["response"].(map[string]any)["output"]).To(HaveLen(4), "the transcript does not carry it")
	})

	It("sends the inline system message from the first call on when asked", func(ctx SpecContext) {
		s := toolThenText()
		p := agent.Plan{Model: "pol", Main: agent.Conversation{Script: "s", Task: "run echo hi"}, Attribution: agent.Delivered,
			InlineSystem: &agent.InlineSystem{Text: agentList, FromFirstCall: true}}
		res, err := agent.Run(ctx, agent.ClaudeCode, agent.Target{BaseURL: serve(s), RolloutID: "r1"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests).To(HaveLen(2))
		for i, want := range [][]string{{"user", "system", "system"}, {"user", "system", "system", "assistant", "user"}} {
			roles, texts := rolesOf(s.requests[i])
			Expect(roles).To(Equal(want), "call %d", i+1)
			Expect(texts).To(HaveLen(2))
			Expect(texts[1]).To(Equal(agentList), "call %d", i+1)
		}
	})
})

var _ = Describe("the OpenAI Chat agent", func() {
	plan := func(attr agent.Attribution, stream bool) agent.Plan {
		return agent.Plan{Model: "pol", Main: agent.Conversation{Script: "s", Task: "list files"}, Stream: stream,
			Attribution: attr, ToolResults: map[string]string{"bash": "a.txt"}}
	}

	It("parses streamed tool-call deltas and echoes the conversation", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			if n == 1 {
				sse(w, chatToolCallStream("chatcmpl-1")...)
				return
			}
			sse(w, `data: {"id":"chatcmpl-2","choices":[{"index":0,"delta":{"content":"one file"},"finish_reason":"stop"}]}`+"\n\n", "data: [DONE]\n\n")
		}}
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), TaskIndex: 3, RolloutIndex: 1}, plan(agent.Delivered, true))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests[0].Path).To(Equal("/ng-rollout/3-1/training-token-capture/v1/chat/completions"))
		msgs := s.requests[1].JSON["messages"].([]any)
		Expect(msgs).To(HaveLen(4))
		asst := msgs[2].(map[string]any)
		Expect(asst["content"]).To(BeNil())
		Expect(asst["tool_calls"]).To(ConsistOf(HaveKeyWithValue("function", map[string]any{"name": "bash", "arguments": `{"cmd": "ls"}`})))
		Expect(msgs[3]).To(Equal(map[string]any{"role": "tool", "tool_call_id": "call_1", "content": "a.txt"}))
		Expect(res.Record).To(HaveKeyWithValue("_ng_task_index", BeNumerically("==", 3)))
		Expect(res.Record).To(HaveKeyWithValue("_ng_rollout_index", BeNumerically("==", 1)))
		Expect(res.Record).NotTo(HaveKey("_ng_rollout_id"))
		Expect(res.Record["response"]).To(HaveKeyWithValue("id", "chatcmpl-2"))
	})

	It("resends an identical body for a scripted retry, with the fault on the first attempt only", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			if r.Header.Get("X-Fake-Fault") == "503" {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			chatText(w, fmt.Sprintf("chatcmpl-%d", n), "done")
		}}
		p := plan(agent.Delivered, false)
		p.Retries = []agent.Retry{{Turn: 0, Fault: "503"}}
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r2"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests).To(HaveLen(2))
		Expect(s.requests[0].Body).To(Equal(s.requests[1].Body))
		Expect(s.requests[1].Header.Get("X-Fake-Fault")).To(BeEmpty())
		Expect(res.Calls).To(HaveLen(2))
		Expect(res.Calls[0].Status).To(Equal(http.StatusServiceUnavailable))
		Expect(res.Record["response"]).To(HaveKeyWithValue("id", "chatcmpl-2"))
	})

	It("synthesizes an unattributed record: fresh id, rewritten final text", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) { chatText(w, "chatcmpl-9", "the answer") }}
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r3"}, plan(agent.Unattributed, false))
		Expect(err).NotTo(HaveOccurred())
		resp := res.Record["response"].(map[string]any)
		Expect(resp["id"]).To(HavePrefix("resp_"))
		Expect(resp["id"]).NotTo(Equal("chatcmpl-9"))
		Expect(fmt.Sprint(resp["output"])).NotTo(ContainSubstring("the answer"))
	})

	It("reports vLLM's error message when a call is refused, and still returns the record", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"error":{"message":"This model's maximum context length is 32768 tokens.","type":"BadRequestError","code":400}}`)
		}}
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r4"}, plan(agent.Delivered, false))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).To(MatchError(agent.ErrModelCall))
		Expect(res.Err.Error()).To(ContainSubstring("HTTP 400: This model's maximum context length is 32768 tokens."))
		Expect(res.Record).To(HaveKey("response"))
	})

	It("fails a stream that ends before [DONE]", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			sse(w, `data: {"id":"chatcmpl-1","choices":[{"index":0,"delta":{"content":"par"}}]}`+"\n\n")
		}}
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r5"}, plan(agent.Delivered, true))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).To(MatchError(ContainSubstring("stream ended before [DONE]")))
	})
})

var _ = Describe("the custom agent", func() {
	It("builds its own URL without the training-capture segment", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) { chatText(w, "chatcmpl-1", "hi") }}
		_, err := agent.Run(ctx, agent.Custom, agent.Target{BaseURL: serve(s), RolloutID: "r6"},
			agent.Plan{Model: "pol", Main: agent.Conversation{Task: "hi"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(s.requests[0].Path).To(Equal("/ng-rollout/r6/v1/chat/completions"))
	})
})

var _ = DescribeTable("bad targets and plans are refused before any traffic",
	func(k agent.Kind, t agent.Target, p agent.Plan, want error) {
		_, err := agent.Run(context.Background(), k, t, p)
		Expect(err).To(MatchError(want))
	},
	Entry("unknown kind", agent.Kind("bogus"), agent.Target{BaseURL: "http://x"}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}}, agent.ErrInvalidPlan),
	Entry("no base URL", agent.OpenAIChat, agent.Target{}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}}, agent.ErrInvalidTarget),
	Entry("rollout id with a slash", agent.OpenAIChat, agent.Target{BaseURL: "http://x", RolloutID: "a/b"}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}}, agent.ErrInvalidTarget),
	Entry("rollout id with a leading dash", agent.OpenAIChat, agent.Target{BaseURL: "http://x", RolloutID: "-x"}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}}, agent.ErrInvalidTarget),
	Entry("no model", agent.OpenAIChat, agent.Target{BaseURL: "http://x"}, agent.Plan{Main: agent.Conversation{Task: "t"}}, agent.ErrInvalidPlan),
	Entry("no task", agent.OpenAIChat, agent.Target{BaseURL: "http://x"}, agent.Plan{Model: "m"}, agent.ErrInvalidPlan),
	Entry("unknown attribution", agent.OpenAIChat, agent.Target{BaseURL: "http://x"}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}, Attribution: "x"}, agent.ErrInvalidPlan),
	Entry("unknown record key", agent.OpenAIChat, agent.Target{BaseURL: "http://x"}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}, RecordKey: "x"}, agent.ErrInvalidPlan),
	Entry("inline system message on a Chat agent", agent.OpenAIChat, agent.Target{BaseURL: "http://x"}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}, InlineSystem: &agent.InlineSystem{Text: "x"}}, agent.ErrInvalidPlan),
	Entry("inline system message without text", agent.ClaudeCode, agent.Target{BaseURL: "http://x"}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}, InlineSystem: &agent.InlineSystem{}}, agent.ErrInvalidPlan),
	Entry("native tokens on the Messages agent", agent.ClaudeCode, agent.Target{BaseURL: "http://x"}, agent.Plan{Model: "m", Main: agent.Conversation{Task: "t"}, NativeTokens: true}, agent.ErrInvalidPlan),
)

// chatWithLogprobs answers a chat completion whose log-probs name tokens.
func chatWithLogprobs(w http.ResponseWriter, id, text string, tokens ...string) {
	content := make([]string, len(tokens))
	for i, t := range tokens {
		content[i] = fmt.Sprintf(`{"token":%q,"logprob":-0.%d}`, t, i+1)
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"id":%q,"object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":%q},"logprobs":{"content":[%s]},"finish_reason":"stop"}]}`,
		id, text, strings.Join(content, ","))
}

var _ = Describe("the record's keys and token fields", func() {
	base := func() agent.Plan {
		return agent.Plan{Model: "pol", Main: agent.Conversation{Task: "hi"}, Attribution: agent.Delivered}
	}

	DescribeTable("carry the rollout key the plan asks for",
		func(ctx SpecContext, key agent.RecordKey, want map[string]any, absent []string) {
			s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) { chatText(w, "chatcmpl-1", "hi") }}
			p := base()
			p.RecordKey = key
			res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r7"}, p)
			Expect(err).NotTo(HaveOccurred())
			Expect(s.requests[0].Path).To(Equal("/ng-rollout/r7/training-token-capture/v1/chat/completions"))
			for k, v := range want {
				Expect(res.Record).To(HaveKeyWithValue(k, v))
			}
			for _, k := range absent {
				Expect(res.Record).NotTo(HaveKey(k))
			}
		},
		Entry("copied from the target", agent.KeyFromTarget, map[string]any{"_ng_rollout_id": "r7"}, nil),
		Entry("omitted", agent.KeyOmitted, map[string]any{}, []string{"_ng_rollout_id", "_ng_task_index", "_ng_rollout_index"}),
		Entry("malformed", agent.KeyMalformed, map[string]any{"_ng_rollout_id": "bad/r7"}, nil),
	)

	It("declares an explicit terminal call id when the plan names one", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) { chatText(w, "chatcmpl-1", "hi") }}
		p := base()
		p.ExplicitCallID = "call-42"
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r8"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Record).To(HaveKeyWithValue("_ng_terminal_model_call_id", "call-42"))
	})

	It("asks for log-probs and writes the reply's own token ids when native", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			chatWithLogprobs(w, "chatcmpl-1", "hi", "token_id:12", "token_id:151645")
		}}
		p := base()
		p.NativeTokens = true
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r9"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests[0].JSON).To(HaveKeyWithValue("logprobs", true))
		out := res.Record["response"].(map[string]any)["output"].([]any)
		last := out[len(out)-1].(map[string]any)
		Expect(last).To(HaveKeyWithValue("generation_token_ids", []any{12.0, 151645.0}))
		Expect(last).To(HaveKeyWithValue("generation_log_probs", []any{-0.1, -0.2}))
	})

	It("does not ask for log-probs unless native", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) { chatText(w, "chatcmpl-1", "hi") }}
		_, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r10"}, base())
		Expect(err).NotTo(HaveOccurred())
		Expect(s.requests[0].JSON).NotTo(HaveKey("logprobs"))
	})

	DescribeTable("a native agent fails clearly when the reply has no token ids",
		func(ctx SpecContext, answer func(w http.ResponseWriter), want string) {
			s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) { answer(w) }}
			p := base()
			p.NativeTokens = true
			res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r11"}, p)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Err).To(MatchError(agent.ErrModelCall))
			Expect(res.Err.Error()).To(ContainSubstring(want))
			Expect(res.Record).To(HaveKey("response"))
		},
		Entry("no log-probs at all", func(w http.ResponseWriter) { chatText(w, "chatcmpl-1", "hi") },
			"carries no log-probs"),
		Entry("log-probs as text tokens", func(w http.ResponseWriter) { chatWithLogprobs(w, "chatcmpl-1", "hi", "hi") },
			`token "hi" is not a token id`),
		Entry("a negative id", func(w http.ResponseWriter) { chatWithLogprobs(w, "chatcmpl-1", "hi", "token_id:-3") },
			`token "token_id:-3" is not a token id`),
	)
})

var _ = Describe("the agent's private HTTP client", func() {
	It("leaves no keep-alive connection (nor its goroutines) behind after the run", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) { chatText(w, "chatcmpl-1", "done") }}
		srv := httptest.NewServer(s)
		DeferCleanup(srv.Close)
		baseline := goleak.IgnoreCurrent()
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: srv.URL, RolloutID: "idle"},
			agent.Plan{Model: "pol", Main: agent.Conversation{Task: "hi"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests).NotTo(BeEmpty(), "the run must have opened a connection for this check to mean anything")
		Eventually(func() error { return goleak.Find(baseline) }).WithTimeout(3 * time.Second).Should(Succeed())
	})
})
