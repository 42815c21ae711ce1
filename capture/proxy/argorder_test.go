package proxy_test

import (
	"bytes"
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
)

// followUp builds Claude Code's next request from its first one, the way the
// CLI does it: the streamed partial_json is parsed and written again
// compactly in the order it arrived (JSON.parse/JSON.stringify keep it), the
// tool result follows as a new user message.
func followUp(first []byte, toolID, name, partialJSON, result string) []byte {
	GinkgoHelper()
	var top map[string]json.RawMessage
	Expect(json.Unmarshal(first, &top)).To(Succeed())
	var msgs []json.RawMessage
	Expect(json.Unmarshal(top["messages"], &msgs)).To(Succeed())
	var input bytes.Buffer
	Expect(json.Compact(&input, []byte(partialJSON))).To(Succeed())
	asst := `{"role":"assistant","content":[{"type":"tool_use","id":` + string(mustJSON(toolID)) + `,"name":` + string(mustJSON(name)) +
		`,"input":` + input.String() + `}]}`
	user := `{"role":"user","content":[{"tool_use_id":` + string(mustJSON(toolID)) + `,"type":"tool_result","content":` +
		string(mustJSON(result)) + `,"is_error":false}]}`
	msgs = append(msgs, json.RawMessage(asst), json.RawMessage(user))
	top["messages"] = mustJSON(msgs)
	return mustJSON(top)
}

// streamedToolUse reads the first tool_use block of a Messages SSE reply:
// its id, name and the concatenated partial_json exactly as sent.
func streamedToolUse(b []byte) (id, name, partial string) {
	GinkgoHelper()
	open := -1
	var sb strings.Builder
	for _, ev := range parseSSE(b) {
		var d map[string]any
		Expect(json.Unmarshal([]byte(ev.Data), &d)).To(Succeed())
		switch ev.Event {
		case "content_block_start":
			blk := d["content_block"].(map[string]any)
			if blk["type"] == "tool_use" && open < 0 {
				open = int(d["index"].(float64))
				id, name = blk["id"].(string), blk["name"].(string)
			}
		case "content_block_delta":
			delta := d["delta"].(map[string]any)
			if int(d["index"].(float64)) == open && delta["type"] == "input_json_delta" {
				sb.WriteString(delta["partial_json"].(string))
			}
		}
	}
	Expect(open).To(BeNumerically(">=", 0), "no tool_use block in the reply")
	return id, name, sb.String()
}

var _ = Describe("tool-call arguments keep their key order on real Claude Code traffic", func() {
	var fake *vllm.Server
	BeforeEach(func() { fake = startFake() })

	DescribeTable("a schema-ordered tool call and its echo chain unmasked",
		func(ctx SpecContext, tool, args string) {
			Expect(fake.SetScript(vllm.Script{Name: "argorder", Turns: []vllm.Turn{
				{ToolCalls: []vllm.ScriptToolCall{{Name: tool, Arguments: args}}},
				{Content: "Done."},
			}})).To(Succeed())
			st := store.NewMemoryStore()
			p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.Model = "policy"; o.RequestTokenIDs = true })
			url := p.URL() + "/ng-rollout/ao/training-token-capture/v1/messages?beta=true"
			hdr := fixtureHeaders("claude-code/v2.1.328/say-hi-path-prefix/calls.json", 0)
			hdr["X-Fake-Script"] = "argorder"
			first := readFixture("claude-code/v2.1.328/tool-bash/call-01.request.json")

			r1 := do(ctx, "POST", url, first, hdr)
			Expect(r1.Status).To(Equal(200), string(r1.Body))
			id, name, partial := streamedToolUse(r1.Body)
			Expect(name).To(Equal(tool))
			By("the client gets the generated argument text verbatim")
			Expect(partial).To(Equal(args))

			r2 := do(ctx, "POST", url, followUp(first, id, name, partial, "ok"), hdr)
			Expect(r2.Status).To(Equal(200), string(r2.Body))
			es := entries(ctx, st, "ao")
			Expect(es).To(HaveLen(2))
			led := ledgerOf(fake, 2)
			matchesLedger(es[0], led[0])
			matchesLedger(es[1], led[1])
			By("the echoed call renders as the generated tokens")
			Expect(*es[1].ParentResolution).To(Equal(record.ResolutionResolved), es[1].ParentResolutionReason)
			prefix := append(append([]int(nil), es[0].PromptTokenIDs...), es[0].GenerationTokenIDs...)
			Expect(es[1].PromptTokenIDs[:len(prefix)]).To(Equal(prefix))

			snap, err := st.Freeze(ctx, "ao")
			Expect(err).NotTo(HaveOccurred())
			res := consumer.ConsumeSnapshot(snap, consumer.Input{Model: "policy"}, consumer.DefaultOptions())
			Expect(res.MaskSample).To(BeFalse(), consumer.MaskExplanation(res))
		},
		Entry("Write (file_path, content)", "Write", `{"file_path": "/workspace/notes.txt", "content": "line one\nline two\n"}`),
		Entry("Edit (file_path, old_string, new_string)", "Edit", `{"file_path": "/workspace/a.go", "old_string": "x := 1", "new_string": "x := 2"}`),
		Entry("Read with offset and limit", "Read", `{"file_path": "/workspace/big.log", "offset": 120, "limit": 40}`),
		Entry("Bash with timeout", "Bash", `{"command": "make test", "timeout": 600000, "description": "Run the tests"}`),
		Entry("a nested object argument", "Agent", `{"description": "Find", "prompt": "look", "options": {"zeta": 1, "alpha": [{"y": 2, "x": 1}]}}`),
		Entry("non-ASCII text", "Write", `{"file_path": "/workspace/ü.txt", "content": "héllo — ✓ 日本語"}`),
	)

	It("re-sends client JSON it does not change byte for byte (chat tools and messages)", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		p := startProxy(ctx, up.URL(), store.NewMemoryStore(), func(o *proxy.Options) { o.RequestTokenIDs = true })
		body := `{"model":"stub-model","tools":[{"type":"function","function":{"name":"Write","parameters":{"type":"object","properties":{"file_path":{"type":"string"},"content":{"type":"string"}},"required":["file_path","content"]}}}],` +
			`"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"Write","arguments":{"file_path":"/a","content":"x","n":1.0}}}]},{"role":"tool","tool_call_id":"c1","content":"ok"}],"temperature":0.70}`
		r := do(ctx, "POST", p.URL()+"/ng-rollout/raw/training-token-capture/v1/chat/completions", []byte(body), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		gens := up.generations()
		Expect(gens).To(HaveLen(1))
		got := gens[0].Raw
		for _, member := range []string{
			`"tools":[{"type":"function","function":{"name":"Write","parameters":{"type":"object","properties":{"file_path":{"type":"string"},"content":{"type":"string"}},"required":["file_path","content"]}}}]`,
			`"arguments":{"file_path":"/a","content":"x","n":1.0}`,
			`"temperature":0.70`,
		} {
			Expect(string(got)).To(ContainSubstring(member))
		}
		Expect(string(got)).To(HavePrefix(`{"model":"stub-model","tools":`))
	})

	It("passes Responses tool schemas and object tool outputs on in the client's order", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		p := startProxy(ctx, up.URL(), store.NewMemoryStore(), func(o *proxy.Options) { o.RequestTokenIDs = true })
		body := `{"model":"stub-model","tools":[{"type":"function","name":"Write","parameters":{"type":"object","properties":{"file_path":{},"content":{}}}}],` +
			`"input":[{"role":"user","content":"hi"},{"type":"function_call","call_id":"c1","name":"Write","arguments":"{\"file_path\": \"/a\", \"content\": \"x\"}"},` +
			`{"type":"function_call_output","call_id":"c1","output":{"status":"ok","bytes":10}}]}`
		r := do(ctx, "POST", p.URL()+"/ng-rollout/rawr/training-token-capture/v1/responses", []byte(body), nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		got := string(up.generations()[0].Raw)
		Expect(got).To(ContainSubstring(`"parameters":{"type":"object","properties":{"file_path":{},"content":{}}}`))
		Expect(got).To(ContainSubstring(`"arguments":"{\"file_path\": \"/a\", \"content\": \"x\"}"`))
		Expect(got).To(ContainSubstring(`"content":"{\"status\":\"ok\",\"bytes\":10}"`))
	})
})
