package proxy_test

import (
	"context"
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// fixtureHeaders returns the headers a recorded Claude Code call sent, minus
// the ones the HTTP client sets itself.
func fixtureHeaders(callsFile string, call int) map[string]string {
	var doc struct {
		Calls []struct {
			Headers [][2]string `json:"headers"`
		} `json:"calls"`
	}
	ExpectWithOffset(1, json.Unmarshal(readFixture(callsFile), &doc)).To(Succeed())
	out := map[string]string{}
	for _, h := range doc.Calls[call].Headers {
		switch strings.ToLower(h[0]) {
		case "host", "content-length", "connection":
			continue
		case "x-api-key":
			out[h[0]] = "dummy-key"
		default:
			out[h[0]] = h[1]
		}
	}
	return out
}

// anthropicMessage reassembles a Messages reply from its SSE events and
// checks the event grammar on the way.
func anthropicMessage(b []byte) (map[string]any, []string) {
	evs := parseSSE(b)
	names := eventNames(evs)
	var msg map[string]any
	var blocks []map[string]any
	partial := map[int]string{}
	for _, ev := range evs {
		var d map[string]any
		ExpectWithOffset(1, json.Unmarshal([]byte(ev.Data), &d)).To(Succeed())
		ExpectWithOffset(1, d["type"]).To(Equal(ev.Event))
		switch ev.Event {
		case "message_start":
			msg = d["message"].(map[string]any)
		case "content_block_start":
			i := int(d["index"].(float64))
			ExpectWithOffset(1, i).To(Equal(len(blocks)))
			blocks = append(blocks, d["content_block"].(map[string]any))
		case "content_block_delta":
			i := int(d["index"].(float64))
			delta := d["delta"].(map[string]any)
			switch delta["type"] {
			case "text_delta":
				blocks[i]["text"] = blocks[i]["text"].(string) + delta["text"].(string)
			case "thinking_delta":
				blocks[i]["thinking"] = blocks[i]["thinking"].(string) + delta["thinking"].(string)
			case "signature_delta":
				blocks[i]["signature"] = delta["signature"]
			case "input_json_delta":
				partial[i] += delta["partial_json"].(string)
			}
		case "message_delta":
			for k, v := range d["delta"].(map[string]any) {
				msg[k] = v
			}
		}
	}
	for i, js := range partial {
		var in any
		ExpectWithOffset(1, json.Unmarshal([]byte(js), &in)).To(Succeed())
		blocks[i]["input"] = in
	}
	content := make([]any, len(blocks))
	for i, b := range blocks {
		content[i] = b
	}
	msg["content"] = content
	return msg, names
}

var _ = Describe("Anthropic Messages route", func() {
	var (
		up *stubVLLM
		st *store.MemoryStore
		p  *proxy.Proxy
	)
	const base = "/ng-rollout/cc1/training-token-capture"
	BeforeEach(func() {
		up = newStubVLLM()
		DeferCleanup(up.Close)
		st = store.NewMemoryStore()
		p = startProxy(context.Background(), up.URL(), st, func(o *proxy.Options) { o.Model = "stub-model"; o.RequestTokenIDs = true })
	})

	It("accepts Claude Code's say-hi call as recorded and streams a valid reply", func(ctx SpecContext) {
		body := readFixture("claude-code/v2.1.328/say-hi/call-01.request.json")
		hdr := fixtureHeaders("claude-code/v2.1.328/say-hi-path-prefix/calls.json", 0)
		r := do(ctx, "POST", p.URL()+base+"/v1/messages?beta=true", body, hdr)
		Expect(r.Status).To(Equal(200), string(r.Body))
		Expect(r.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
		Expect(tokenKeysIn(r.Body)).To(BeFalse())
		msg, names := anthropicMessage(r.Body)
		Expect(names).To(Equal([]string{"message_start", "content_block_start", "ping", "content_block_delta",
			"content_block_stop", "message_delta", "message_stop"}))
		Expect(msg["stop_reason"]).To(Equal("end_turn"))
		Expect(msg["content"]).To(ConsistOf(HaveKeyWithValue("text", "hello there")))

		By("translating to one leading system message, billing header dropped, model replaced")
		sent := up.generations()[0]
		Expect(sent.Header.Get("Anthropic-Beta")).To(ContainSubstring("claude-code-20250219"))
		Expect(sent.Body["model"]).To(Equal("stub-model"))
		msgs := sent.Body["messages"].([]any)
		Expect(msgs[0].(map[string]any)["role"]).To(Equal("system"))
		for _, m := range msgs[1:] {
			Expect(m.(map[string]any)["role"]).NotTo(Equal("system"))
		}
		Expect(msgs[0].(map[string]any)["content"]).NotTo(ContainSubstring("x-anthropic-billing-header"))
		Expect(sent.Body["tools"]).To(HaveLen(12))
		Expect(sent.Body["max_tokens"]).To(BeNumerically("==", 128000))

		By("recording a Responses-shaped payload whose id is the message id")
		es := entries(ctx, st, "cc1")
		Expect(es).To(HaveLen(1))
		Expect(*es[0].ResponseID).To(Equal(msg["id"]))
		Expect(msg["id"]).To(MatchRegexp(`^resp_[0-9a-f]{32}$`))
		Expect(*es[0].ParentResolution).To(Equal(record.ResolutionRoot))
	})

	It("answers non-streaming requests with a Messages object", func(ctx SpecContext) {
		up.script(stubReply{Content: "ok", Finish: "length"})
		body := map[string]any{"model": "claude-x", "max_tokens": 10, "system": "be brief",
			"messages": []any{map[string]any{"role": "user", "content": "hi"}}}
		r := do(ctx, "POST", p.URL()+base+"/v1/messages", mustJSON(body), nil)
		Expect(r.Status).To(Equal(200))
		m := r.JSON()
		Expect(m["type"]).To(Equal("message"))
		Expect(m["stop_reason"]).To(Equal("max_tokens"))
		Expect(m["usage"]).To(HaveKey("input_tokens"))
		Expect(tokenKeysIn(r.Body)).To(BeFalse())
	})

	DescribeTable("chains Claude Code's follow-up after a tool call",
		func(ctx SpecContext, dir, fakeToolID string, first stubReply, wantBlocks []string) {
			up.script(first, stubReply{Content: "The command printed: hi"})
			body1 := readFixture("claude-code/v2.1.328/" + dir + "/call-01.request.json")
			r1 := do(ctx, "POST", p.URL()+base+"/v1/messages?beta=true", body1, nil)
			Expect(r1.Status).To(Equal(200))
			msg, _ := anthropicMessage(r1.Body)
			Expect(msg["stop_reason"]).To(Equal("tool_use"))
			var types []string
			var toolID string
			for _, b := range msg["content"].([]any) {
				b := b.(map[string]any)
				types = append(types, b["type"].(string))
				if b["type"] == "tool_use" {
					toolID = b["id"].(string)
					Expect(b["input"]).To(Equal(map[string]any{"command": "echo hi", "description": "Print hi"}))
				}
			}
			Expect(types).To(Equal(wantBlocks))

			By("sending the recorded follow-up with this proxy's tool id in place of the recorded one")
			body2 := strings.ReplaceAll(string(readFixture("claude-code/v2.1.328/"+dir+"/call-02.request.json")), fakeToolID, toolID)
			r2 := do(ctx, "POST", p.URL()+base+"/v1/messages?beta=true", []byte(body2), nil)
			Expect(r2.Status).To(Equal(200), string(r2.Body))
			sent := up.generations()[1].Body["messages"].([]any)
			var roles []string
			for _, m := range sent {
				roles = append(roles, m.(map[string]any)["role"].(string))
			}
			Expect(roles).To(Equal([]string{"system", "user", "assistant", "tool"}))
			asst := sent[2].(map[string]any)
			Expect(asst["tool_calls"]).To(HaveLen(1))

			es := entries(ctx, st, "cc1")
			Expect(es).To(HaveLen(2))
			Expect(es[1].ParentResolutionReason).To(BeEmpty())
			Expect(*es[1].ParentResolution).To(Equal(record.ResolutionResolved))
			Expect(*es[1].ParentCallID).To(Equal(es[0].ModelCallID))
			Expect(incomplete(ctx, st, "cc1")).To(BeFalse())
		},
		Entry("tool-bash", "tool-bash", "toolu_01FAKE0815ab7fa82b4ebd",
			stubReply{ToolCalls: [][2]string{{"Bash", `{"command": "echo hi", "description": "Print hi"}`}}},
			[]string{"tool_use"}),
		Entry("tool-bash-thinking", "tool-bash-thinking", "toolu_01FAKEff9b7d7a364a40af",
			stubReply{Reasoning: "The user wants me to run echo hi. I will use Bash.", Content: "I'll run that command.",
				ToolCalls: [][2]string{{"Bash", `{"command": "echo hi", "description": "Print hi"}`}}},
			[]string{"thinking", "text", "tool_use"}),
	)

	It("answers count_tokens without recording or marking", func(ctx SpecContext) {
		body := map[string]any{"model": "claude-x", "messages": []any{map[string]any{"role": "user", "content": "count me"}}}
		r := do(ctx, "POST", p.URL()+base+"/v1/messages/count_tokens?beta=true", mustJSON(body), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		Expect(r.JSON()["input_tokens"]).To(BeNumerically(">", 0))
		Expect(entries(ctx, st, "cc1")).To(BeEmpty())
		Expect(incomplete(ctx, st, "cc1")).To(BeFalse())
	})

	It("uses Anthropic's error envelope for upstream errors", func(ctx SpecContext) {
		up.script(stubReply{Status: 503, ErrBody: `{"error":{"message":"engine overloaded","type":"ServiceUnavailable","param":null,"code":503}}`})
		body := readFixture("claude-code/v2.1.328/say-hi/call-01.request.json")
		r := do(ctx, "POST", p.URL()+base+"/v1/messages?beta=true", body, nil)
		Expect(r.Status).To(Equal(503))
		m := r.JSON()
		Expect(m["type"]).To(Equal("error"))
		Expect(m["error"]).To(HaveKeyWithValue("type", "overloaded_error"))
		Expect(m["error"]).To(HaveKeyWithValue("message", "engine overloaded"))
	})

	Context("with every recorded Claude Code request body", func() {
		It("accepts each one", func(ctx context.Context) {
			files := []string{
				"v2.1.328/bare/call-01.request.json", "v2.1.328/custom-model/call-01.request.json",
				"v2.1.328/json-schema/call-02.request.json", "v2.1.328/no-experimental-betas/call-01.request.json",
				"v2.1.328/resume/call-01.request.json", "v2.1.328/sonnet-4-5/call-01.request.json",
				"v2.1.328/subagent/call-05.request.json", "v2.1.328/tool-bash-3-steps/call-04.request.json",
				"v2.1.328/tool-bash-denied/call-02.request.json", "v2.1.328/tool-read/call-02.request.json",
				"v2.1.197/say-hi/call-02.request.json", "v2.1.197/tool-bash-thinking/call-03.request.json",
			}
			for _, f := range files {
				r := do(ctx, "POST", p.URL()+base+"/v1/messages?beta=true", readFixture("claude-code/"+f), nil)
				Expect(r.Status).To(Equal(200), f+": "+string(r.Body))
				_, names := anthropicMessage(r.Body)
				Expect(names[len(names)-1]).To(Equal("message_stop"), f)
			}
			Expect(entries(ctx, st, "cc1")).To(HaveLen(len(files)))
			Expect(incomplete(ctx, st, "cc1")).To(BeFalse())
		})
	})
})
