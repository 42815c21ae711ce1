package agent_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/scenarios/agent"
)

// anthropicEdit streams one Edit tool call whose arguments come in schema
// order (not alphabetical), split mid-key as a model streams them.
func anthropicEdit(id string) []string {
	frames := anthropicToolUse(id)
	frames[1] = strings.Replace(frames[1], `"name":"Bash"`, `"name":"Edit"`, 1)
	frames[4] = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"file_path\\\": \\\"/w/a.go\\\", \\\"old_st\"}}\n\n"
	frames[5] = "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"ring\\\": \\\"x\\\", \\\"new_string\\\": \\\"é\\\"}\"}}\n\n"
	return frames
}

var _ = Describe("the Claude-Code-like agent echoes tool calls like the CLI", func() {
	editInput := func(r *recorded) string {
		GinkgoHelper()
		var req struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		Expect(json.Unmarshal(r.Body, &req)).To(Succeed())
		for _, m := range req.Messages {
			if m.Role != "assistant" {
				continue
			}
			var blocks []struct {
				Type  string          `json:"type"`
				Input json.RawMessage `json:"input"`
			}
			Expect(json.Unmarshal(m.Content, &blocks)).To(Succeed())
			for _, b := range blocks {
				if b.Type == "tool_use" {
					return string(b.Input)
				}
			}
		}
		Fail("no tool_use block echoed: " + string(r.Body))
		return ""
	}
	run := func(ctx SpecContext, p agent.Plan) []*recorded {
		GinkgoHelper()
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			if n == 1 {
				sse(w, anthropicEdit("msg_1")...)
				return
			}
			sse(w, anthropicText("msg_2", "edited")...)
		}}
		res, err := agent.Run(ctx, agent.ClaudeCode, agent.Target{BaseURL: serve(s), RolloutID: "r1"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests).To(HaveLen(2))
		return s.requests
	}
	plan := func() agent.Plan {
		return agent.Plan{Model: "pol", Main: agent.Conversation{Script: "s", Task: "edit a.go"}, Attribution: agent.Delivered}
	}

	It("keeps the model's key order and text in the echoed input (JSON.stringify of the parsed object)", func(ctx SpecContext) {
		reqs := run(ctx, plan())
		Expect(editInput(reqs[1])).To(Equal(`{"file_path":"/w/a.go","old_string":"x","new_string":"é"}`))
	})

	It("merges the CLI's defaults into the echo only ({...defaults, ...input}), not into the record's transcript", func(ctx SpecContext) {
		p := plan()
		p.EchoInputDefaults = map[string]string{"Edit": `"replace_all":false`}
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			if n == 1 {
				sse(w, anthropicEdit("msg_1")...)
				return
			}
			sse(w, anthropicText("msg_2", "edited")...)
		}}
		res, err := agent.Run(ctx, agent.ClaudeCode, agent.Target{BaseURL: serve(s), RolloutID: "r1"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(editInput(s.requests[1])).To(Equal(`{"replace_all":false,"file_path":"/w/a.go","old_string":"x","new_string":"é"}`))
		out := res.Record["response"].(map[string]any)["output"].([]any)
		var args []string
		for _, it := range out {
			if m := it.(map[string]any); m["type"] == "function_call" {
				args = append(args, m["arguments"].(string))
			}
		}
		Expect(args).To(Equal([]string{`{"file_path":"/w/a.go","old_string":"x","new_string":"é"}`}))
	})

	DescribeTable("refuses plans it cannot carry out",
		func(k agent.Kind, edit func(*agent.Plan), want string) {
			p := plan()
			edit(&p)
			_, err := agent.Run(context.Background(), k, agent.Target{BaseURL: "http://127.0.0.1:1", RolloutID: "r1"}, p)
			Expect(err).To(MatchError(ContainSubstring(want)))
			Expect(err).To(MatchError(agent.ErrInvalidPlan))
		},
		Entry("members that are not JSON", agent.ClaudeCode, func(p *agent.Plan) { p.EchoInputDefaults = map[string]string{"Edit": "replace_all"} },
			`EchoInputDefaults["Edit"] = "replace_all" is not a list of JSON object members`),
		Entry("a cut and a fault on one attempt", agent.ClaudeCode, func(p *agent.Plan) { p.Retries = []agent.Retry{{Turn: 0, Cut: true, Fault: "500"}} },
			"Retry of turn 0 sets both Cut and Fault"),
		Entry("a cut without a stream", agent.OpenAIChat, func(p *agent.Plan) { p.Retries = []agent.Retry{{Turn: 0, Cut: true}} },
			"Retry of turn 0 cuts a stream, but the plan does not stream"),
	)
})

var _ = Describe("a retried cut stream", func() {
	It("drops the first attempt's connection before message_stop and resends the identical body", func(ctx SpecContext) {
		sawStop := make(chan bool, 4)
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			frames := anthropicText("msg_"+strconv.Itoa(n), "hi")
			w.Header().Set("Content-Type", "text/event-stream")
			for _, f := range frames {
				_, err := w.Write([]byte(f))
				w.(http.Flusher).Flush()
				if err != nil {
					break
				}
			}
			sawStop <- true
		}}
		p := plan0()
		p.Retries = []agent.Retry{{Turn: 0, Cut: true}}
		res, err := agent.Run(ctx, agent.ClaudeCode, agent.Target{BaseURL: serve(s), RolloutID: "r1"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Err).NotTo(HaveOccurred())
		Expect(s.requests).To(HaveLen(2))
		Expect(s.requests[1].Body).To(Equal(s.requests[0].Body), "the retry is byte-identical")
		Expect(res.Calls).To(HaveLen(2))
		Expect(res.Calls[0].Cut).To(BeTrue())
		Expect(res.Calls[0].Error).To(ContainSubstring(agent.ErrStreamCut.Error()))
		Expect(res.Calls[0].ServedID).To(BeEmpty(), "the agent never saw the cut reply whole")
		Expect(res.Calls[1].Error).To(BeEmpty())
		Expect(res.Record["response"].(map[string]any)["id"]).To(Equal("msg_2"), "the record names the kept attempt")
	})
})

func plan0() agent.Plan {
	return agent.Plan{Model: "pol", Main: agent.Conversation{Script: "s", Task: "say hi"}, Attribution: agent.Delivered}
}

var _ = DescribeTable("merging the CLI's defaults like {...defaults, ...input}",
	func(input, defaults, want string) {
		Expect(agent.WithDefaults(input, defaults)).To(Equal(want))
	},
	Entry("a default the model left out goes first", `{"file_path": "/a", "old_string": "x", "new_string": "y"}`, `"replace_all":false`,
		`{"replace_all":false,"file_path":"/a","old_string":"x","new_string":"y"}`),
	Entry("the model's own value moves to the default's place (seen from Claude Code 2.1.328)",
		`{"file_path": "/a", "old_string": "x", "new_string": "y", "replace_all": true}`, `"replace_all":false`,
		`{"replace_all":true,"file_path":"/a","old_string":"x","new_string":"y"}`),
	Entry("an empty input", `{}`, `"replace_all":false`, `{"replace_all":false}`),
	Entry("input that is not an object is left alone", `[1]`, `"replace_all":false`, `[1]`),
)

var _ = Describe("a retried cut Chat stream", func() {
	It("drops the first attempt after its finish_reason chunk and keeps the resent call", func(ctx SpecContext) {
		s := &stub{answer: func(w http.ResponseWriter, r *recorded, n int) {
			if n <= 2 {
				sse(w, chatToolCallStream("chatcmpl-"+strconv.Itoa(n))...)
				return
			}
			chatText(w, "chatcmpl-3", "14")
		}}
		p := agent.Plan{Model: "pol", Main: agent.Conversation{Script: "s", Task: "count"}, Stream: true,
			Attribution: agent.Delivered, Retries: []agent.Retry{{Turn: 0, Cut: true}}}
		res, err := agent.Run(ctx, agent.OpenAIChat, agent.Target{BaseURL: serve(s), RolloutID: "r1"}, p)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Calls).To(HaveLen(3))
		Expect(res.Calls[0].Cut).To(BeTrue())
		Expect(res.Calls[0].Error).To(ContainSubstring(agent.ErrStreamCut.Error()))
		Expect(res.Calls[1].ServedID).To(Equal("chatcmpl-2"))
		Expect(s.requests[1].Body).To(Equal(s.requests[0].Body))
	})
})
