package claudecode_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/harness/claudecode"
)

// jsonString is s as a JSON string literal (for script arguments).
func jsonString(s string) string {
	b, err := json.Marshal(s)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// bodyMessage is one message of a Messages request body, its content raw.
type bodyMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// requestMessages decodes the messages of a Messages request body.
func requestMessages(body []byte) []bodyMessage {
	GinkgoHelper()
	var req struct {
		Messages []bodyMessage `json:"messages"`
	}
	Expect(json.Unmarshal(body, &req)).To(Succeed())
	return req.Messages
}

// echoedToolInputs returns the raw input of every tool_use block the CLI sent
// back, in order, exactly as it wrote them.
func echoedToolInputs(body []byte) []string {
	GinkgoHelper()
	msgs := requestMessages(body)
	var out []string
	for _, m := range msgs {
		if m.Role != "assistant" {
			continue
		}
		var blocks []struct {
			Type  string          `json:"type"`
			Input json.RawMessage `json:"input"`
		}
		if json.Unmarshal(m.Content, &blocks) != nil {
			continue
		}
		for _, b := range blocks {
			if b.Type == "tool_use" {
				out = append(out, string(b.Input))
			}
		}
	}
	return out
}

// compact is the JSON.stringify form of an argument text (order kept).
func compact(args string) string {
	var v json.RawMessage
	Expect(json.Unmarshal([]byte(args), &v)).To(Succeed())
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

// resolutions lists "resolution reason" for each entry, in prompt order.
func resolutions(snap *store.Snapshot) []string {
	var out []string
	for _, e := range snap.Entries {
		out = append(out, strings.TrimSpace(string(resolution(e))+" "+e.ParentResolutionReason))
	}
	return out
}

// expectOneCleanChain checks a delivered, unmasked single chain of n calls.
func expectOneCleanChain(snap *store.Snapshot, rec consumer.Rollout, final *consumer.Result, n int) {
	GinkgoHelper()
	Expect(snap.Entries).To(HaveLen(n))
	roots := 0
	for _, e := range snap.Entries {
		if resolution(e) == record.ResolutionRoot {
			roots++
		} else {
			Expect(resolution(e)).To(Equal(record.ResolutionResolved), "call %s: %s", e.ModelCallID, e.ParentResolutionReason)
		}
	}
	Expect(roots).To(Equal(1))
	Expect(final.MaskSample).To(BeFalse(), "masked: %s", consumer.MaskExplanation(final))
	Expect(final.Error).To(BeEmpty())
	Expect(rec).NotTo(HaveKey(consumer.KeyMaskSample))
	Expect(final.Metrics.NCalls).To(Equal(n))
	Expect(final.Metrics.Chains).To(Equal(1), "one clean chain")
	Expect(final.Metrics.DeliveredFraction).To(Equal(1.0))
}

// toolRun is a scripted CLI run: one turn for each tool call, then the
// answer.
type toolRun struct {
	rollout, script, prompt, tools string
	calls                          []vllm.ScriptToolCall
	answer                         string
}

// play sets the run's script on the fake and has the CLI play it, allowing
// the run's tools.
func (t toolRun) play(ctx SpecContext, r *rig, exe string) *claudecode.Result {
	GinkgoHelper()
	turns := make([]vllm.Turn, 0, len(t.calls)+1)
	for _, c := range t.calls {
		turns = append(turns, vllm.Turn{ToolCalls: []vllm.ScriptToolCall{c}})
	}
	turns = append(turns, vllm.Turn{Content: t.answer})
	Expect(r.fake.SetScript(vllm.Script{Name: t.script, Turns: turns})).To(Succeed())
	return r.runCLI(ctx, exe, t.rollout, t.script, t.prompt, "--allowedTools", t.tools)
}

// expectCleanToolRun plays run, whose tools leave path holding want (ran
// says what a mismatch means), and checks that the CLI answered with no
// error or denial, that each turn was one Messages call, that the last one
// echoes every tool input in the model's key order (echoNote says what a
// mismatch means) and that the rollout is one clean, unmasked chain.
func expectCleanToolRun(ctx SpecContext, r *rig, exe string, run toolRun, path, want, ran string, echoNote ...any) {
	GinkgoHelper()
	res := run.play(ctx, r, exe)
	Expect(res.IsError).To(BeFalse())
	Expect(res.Result).To(Equal(run.answer))
	Expect(res.PermissionDenials).To(BeEmpty())
	Expect(os.ReadFile(path)).To(Equal([]byte(want)), ran)

	n := len(run.calls) + 1
	msgs, _ := messageCalls(r.log.snapshot(), run.rollout)
	Expect(msgs).To(HaveLen(n))
	var inputs []string
	for _, c := range run.calls {
		inputs = append(inputs, compact(c.Arguments))
	}
	Expect(echoedToolInputs(msgs[n-1].Body)).To(Equal(inputs), echoNote...)

	snap, rec, final := r.finalize(ctx, run.rollout, res)
	expectOneCleanChain(snap, rec, final, n)
}

var _ = Describe("the real Claude Code CLI's file tools through the capture proxy", Label("claude-code", "slow"), func() {
	var exe string
	var r *rig
	BeforeEach(func() {
		exe = claudeOrSkip()
		r = startRig()
	})

	// Needs the proxy to keep the model's key order (file_path before
	// content): with sorted keys the echoed call no longer renders as the
	// generated tokens.
	It("writes a file: the schema-ordered Write round trip is one clean, unmasked chain", Label("argument-order"), func(ctx SpecContext) {
		path := filepath.Join(r.dir, "notes.txt")
		expectCleanToolRun(ctx, r, exe, toolRun{
			rollout: "cc-write", script: "write-notes", prompt: "write notes.txt", tools: "Write",
			calls:  []vllm.ScriptToolCall{{Name: "Write", Arguments: `{"file_path": ` + jsonString(path) + `, "content": "line one\nline two\n"}`}},
			answer: "Wrote notes.txt.",
		}, path, "line one\nline two\n", "the CLI ran the Write", "the CLI echoes the input in the model's key order")
	}, SpecTimeout(time.Minute))

	// Needs the proxy's key-order fix too (file_path, old_string,
	// new_string, replace_all is not alphabetical).
	It("edits a file it read: Read, Edit and the answer are one clean, unmasked chain", Label("argument-order"), func(ctx SpecContext) {
		path := filepath.Join(r.dir, "main.go")
		Expect(os.WriteFile(path, []byte("package main\n\nconst greeting = \"hello\"\n"), 0o644)).To(Succeed())
		read := `{"file_path": ` + jsonString(path) + `}`
		// The CLI echoes an Edit as {"replace_all":false, ...input}: the key
		// comes first even when the model wrote it last. This model writes
		// it first, so the echo is what it generated.
		edit := `{"replace_all": false, "file_path": ` + jsonString(path) + `, "old_string": "\"hello\"", "new_string": "\"hi\""}`
		expectCleanToolRun(ctx, r, exe, toolRun{
			rollout: "cc-edit", script: "edit-greeting", prompt: "change the greeting in main.go to hi", tools: "Read,Edit",
			calls:  []vllm.ScriptToolCall{{Name: "Read", Arguments: read}, {Name: "Edit", Arguments: edit}},
			answer: "Changed the greeting to hi.",
		}, path, "package main\n\nconst greeting = \"hi\"\n", "the CLI ran the Edit")
	}, SpecTimeout(time.Minute))

	// What the catalog's claude-code-edit-replace-all scenario models, seen
	// on the real CLI: it does not depend on the key order.
	It("echoes an Edit as {\"replace_all\":false, ...input}: the next call is UNRESOLVED (no_match), masked", func(ctx SpecContext) {
		path := filepath.Join(r.dir, "main.go")
		Expect(os.WriteFile(path, []byte("const greeting = \"hello\"\n"), 0o644)).To(Succeed())
		read := `{"file_path": ` + jsonString(path) + `}`
		edit := `{"file_path": ` + jsonString(path) + `, "old_string": "hello", "new_string": "hi"}`
		res := toolRun{
			rollout: "cc-edit-default", script: "edit-no-default", prompt: "change the greeting to hi", tools: "Read,Edit",
			calls:  []vllm.ScriptToolCall{{Name: "Read", Arguments: read}, {Name: "Edit", Arguments: edit}},
			answer: "Changed the greeting to hi.",
		}.play(ctx, r, exe)
		Expect(res.Result).To(Equal("Changed the greeting to hi."))
		msgs, _ := messageCalls(r.log.snapshot(), "cc-edit-default")
		Expect(msgs).To(HaveLen(3))
		echoed := echoedToolInputs(msgs[2].Body)
		Expect(echoed).To(HaveLen(2))
		Expect(echoed[1]).To(Equal(`{"replace_all":false,`+strings.TrimPrefix(compact(edit), "{")), "the default goes first")

		snap, _, final := r.finalizeAny(ctx, "cc-edit-default", res)
		Expect(resolutions(snap)[2]).To(Equal("unresolved no_match"))
		Expect(final.MaskSample).To(BeTrue())
	}, SpecTimeout(time.Minute))
})

// inlineSystemAfterToolResult returns the text of role:"system" messages
// that follow a tool_result in a Messages body.
func inlineSystemAfterToolResult(body []byte) []string {
	GinkgoHelper()
	msgs := requestMessages(body)
	var out []string
	afterResult := false
	for _, m := range msgs {
		var blocks []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		_ = json.Unmarshal(m.Content, &blocks)
		switch {
		case m.Role == "user" && len(blocks) > 0 && blocks[0].Type == "tool_result":
			afterResult = true
		case m.Role == "system" && afterResult:
			for _, b := range blocks {
				out = append(out, b.Text)
			}
		}
	}
	return out
}

var _ = Describe("the real Claude Code CLI reading a long file", Label("claude-code", "slow"), func() {
	// What the catalog's claude-code-truncated-read scenario models.
	It("adds an inline system note after a truncated Read result in the main agent: parent_digest_mismatch, masked", func(ctx SpecContext) {
		exe := claudeOrSkip()
		r := startRig()
		path := filepath.Join(r.dir, "server.log")
		var b strings.Builder
		for i := 1; i <= 3000; i++ {
			fmt.Fprintf(&b, "INFO request %d served in 3 ms\n", i)
		}
		Expect(os.WriteFile(path, []byte(b.String()), 0o644)).To(Succeed())
		Expect(r.fake.SetScript(vllm.Script{Name: "read-big", Turns: []vllm.Turn{
			{ToolCalls: []vllm.ScriptToolCall{{Name: "Read", Arguments: `{"file_path": ` + jsonString(path) + `}`}}},
			{Content: "The log shows requests being served."},
		}})).To(Succeed())
		res := r.runCLI(ctx, exe, "cc-read-big", "read-big", "what does server.log say?", "--allowedTools", "Read")
		Expect(res.Result).To(Equal("The log shows requests being served."))
		msgs, _ := messageCalls(r.log.snapshot(), "cc-read-big")
		Expect(len(msgs)).To(BeNumerically(">=", 2))
		last := msgs[len(msgs)-1]
		Expect(inlineSystemAfterToolResult(msgs[0].Body)).To(BeEmpty())
		Expect(inlineSystemAfterToolResult(last.Body)).To(ConsistOf(HavePrefix("[Truncated: PARTIAL view — " + path + ": showing lines 1-")))

		snap, _, final := r.finalizeAny(ctx, "cc-read-big", res)
		GinkgoWriter.Printf("truncated Read: %d calls, resolutions %v\n", len(snap.Entries), resolutions(snap))
		Expect(final.Metrics.ParentLinkFailures).To(HaveKeyWithValue("parent_digest_mismatch", 1))
		Expect(final.MaskSample).To(BeTrue())
	}, SpecTimeout(time.Minute))
})

var _ = Describe("the real Claude Code CLI and the fake's session scripts", Label("claude-code", "slow"), func() {
	var exe string
	var r *rig
	BeforeEach(func() {
		exe = claudeOrSkip()
		r = startRig()
	})

	It("sees a missing script as an API error in its own dialect, naming the script, and gives up", func(ctx SpecContext) {
		res, err := r.runCLIExit(ctx, exe, "cc-missing", "no-such-script", "say hi")
		var exit *exec.ExitError
		Expect(errors.As(err, &exit)).To(BeTrue(), "the CLI fails the run: %v", err)
		Expect(res.IsError).To(BeTrue())
		Expect(res.Result).To(ContainSubstring(`fake script "no-such-script" does not exist`))
		msgs, _ := messageCalls(r.log.snapshot(), "cc-missing")
		// 2.1.328 resends a 400 a few times with other tool settings (six
		// calls here), then prints the message; a 404 it would report as
		// "the selected model may not exist", hiding the message.
		Expect(len(msgs)).To(BeNumerically("<=", 8), "the CLI gives up")
		for _, m := range msgs {
			Expect(m.Status).To(Equal(http.StatusBadRequest))
		}
		var envelope struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		Expect(json.Unmarshal(msgs[0].Reply, &envelope)).To(Succeed(), string(msgs[0].Reply))
		Expect(envelope.Type).To(Equal("error"), "Anthropic's envelope, translated by the proxy")
		Expect(envelope.Error.Type).To(Equal("invalid_request_error"))
		Expect(envelope.Error.Message).To(ContainSubstring("PUT /fake/scripts/no-such-script"))
		Expect(r.fake.Ledger()).To(BeEmpty())
	}, SpecTimeout(time.Minute))

	It("retries a fault that fires on the first attempt only, and finishes on the second", func(ctx SpecContext) {
		Expect(r.fake.SetScript(vllm.Script{Name: "flaky-hi", Turns: []vllm.Turn{
			{Content: hiText, Fault: vllm.Fault503, FaultTimes: 1},
		}})).To(Succeed())
		res := r.runCLI(ctx, exe, "cc-flaky", "flaky-hi", "say hi")
		Expect(res.IsError).To(BeFalse())
		Expect(res.Result).To(Equal(hiText))
		msgs, _ := messageCalls(r.log.snapshot(), "cc-flaky")
		Expect(msgs).To(HaveLen(2), "one retry, no race with the client's backoff")
		Expect(msgs[0].Status).To(Equal(http.StatusServiceUnavailable))
		Expect(msgs[1].Status).To(Equal(http.StatusOK))
		Expect(msgs[1].Body).To(Equal(msgs[0].Body), "the retry resends the identical body")
		Expect(r.fake.Ledger()).To(HaveLen(1), "the faulted attempt generated nothing")
		snap, err := r.store.Freeze(ctx, "cc-flaky")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(1))
		GinkgoWriter.Printf("after an upstream 503 and a retry: incomplete=%v\n", snap.Incomplete)
	}, SpecTimeout(time.Minute))

	It("routes the sub-agent's calls (x-claude-code-agent-id) to its own script, so it does not replay the main one", func(ctx SpecContext) {
		for _, sc := range []vllm.Script{
			{Name: "delegate", Turns: []vllm.Turn{
				{ToolCalls: []vllm.ScriptToolCall{{Name: "Agent", Arguments: `{"description": "Print capbench", "prompt": "Run echo capbench and report what it printed.", "subagent_type": "general-purpose"}`}}},
				{Content: "The sub-agent says echo printed capbench."},
			}, Routes: []vllm.Route{{SubAgent: true, Script: "delegate.sub"}}},
			{Name: "delegate.sub", Turns: []vllm.Turn{
				{ToolCalls: []vllm.ScriptToolCall{{Name: "Bash", Arguments: bashArgs}}},
				{Content: "echo printed capbench."},
			}},
		} {
			Expect(r.fake.SetScript(sc)).To(Succeed())
		}
		res := r.runCLI(ctx, exe, "cc-subagent", "delegate", "have a sub-agent run echo capbench", "--allowedTools", "Agent,Bash")
		Expect(res.IsError).To(BeFalse())
		Expect(res.Result).To(Equal("The sub-agent says echo printed capbench."))

		msgs, _ := messageCalls(r.log.snapshot(), "cc-subagent")
		var main, sub []seenCall
		for _, c := range msgs {
			Expect(c.Status).To(Equal(http.StatusOK))
			Expect(c.Script).To(Equal("delegate"), "one header value for the whole session")
			if c.AgentID != "" {
				sub = append(sub, c)
			} else {
				main = append(main, c)
			}
		}
		// The CLI runs the sub-agent in the background: the main agent
		// continues and later gets its report as a user message.
		Expect(len(main)).To(BeNumerically(">=", 2))
		Expect(sub).To(HaveLen(2), "the sub-agent played its own two turns")
		Expect(sub[1].AgentID).To(Equal(sub[0].AgentID))
		bodies := r.upstream.snapshot()
		Expect(bodies).To(HaveLen(len(msgs)))
		var toolOutputs []string
		for _, b := range bodies {
			toolOutputs = append(toolOutputs, toolMessages(b)...)
		}
		Expect(toolOutputs).To(ContainElement(HavePrefix("capbench")), "the sub-agent's Bash ran")
		Expect(bodies[len(bodies)-1]).To(ContainSubstring("echo printed capbench."), "its report reached the main agent")

		snap, err := r.store.Freeze(ctx, "cc-subagent")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(len(msgs)))
		Expect(r.fake.Ledger()).To(HaveLen(len(msgs)), "every generation was captured")
		GinkgoWriter.Printf("sub-agent rollout resolutions: %v\n", resolutions(snap))
	}, SpecTimeout(time.Minute))
})

var _ = Describe("opting in to the CLI specs", func() {
	DescribeTable("runs, skips when off, and fails when on but not installed",
		func(setting func(dir string) string, wantRun, wantSkip, wantFail bool, mention string) {
			dir := GinkgoT().TempDir()
			exe, skip, fail := optIn(setting(dir), dir)
			Expect(exe != "").To(Equal(wantRun))
			Expect(skip != "").To(Equal(wantSkip))
			Expect(fail != "").To(Equal(wantFail))
			Expect(exe + skip + fail).To(ContainSubstring(mention))
		},
		Entry("unset: skipped, saying how to opt in", func(string) string { return "" }, false, true, false, "npm install"),
		Entry("1 without the npm install: a failure, not a skip", func(string) string { return "1" }, false, false, true,
			claudecode.SettingEnv+` asks for the real Claude Code CLI, but it cannot run`),
		Entry("a path that does not exist: a failure", func(string) string { return "/nonexistent/claude" }, false, false, true, "/nonexistent/claude"),
		Entry("an executable: run", func(dir string) string {
			p := filepath.Join(dir, "claude")
			Expect(os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755)).To(Succeed())
			return p
		}, true, false, false, "claude"),
	)
})
