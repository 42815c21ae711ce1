package claudecode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/claudecode"
	"github.com/capbench/capbench/harness/env"
)

const (
	hiText       = "Hi from the fake engine!"
	toolText     = "The command printed capbench."
	thinkText    = "The user wants the word printed, so I run echo."
	thinkAnswer  = "Done: echo printed capbench."
	bashArgs     = `{"command": "echo capbench", "description": "Print capbench"}`
	capturePath  = "/training-token-capture"
	messagesPath = "/v1/messages"
)

var cliScripts = []vllm.Script{
	{Name: "say-hi", Turns: []vllm.Turn{{Content: hiText}}},
	{Name: "bash-echo", Turns: []vllm.Turn{
		{ToolCalls: []vllm.ScriptToolCall{{Name: "Bash", Arguments: bashArgs}}},
		{Content: toolText},
	}},
	{Name: "think-bash", Turns: []vllm.Turn{
		{Reasoning: thinkText, ToolCalls: []vllm.ScriptToolCall{{Name: "Bash", Arguments: bashArgs}}},
		{Content: thinkAnswer},
	}},
}

// npmDir is testdata/npm next to this file.
func npmDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "testdata", "npm")
}

// optIn decides what the CLI specs do with a setting: run with exe, skip
// (the setting is off: the CLI is opt-in) or fail (the user opted in and the
// CLI is missing, which must not pass as a skipped run).
func optIn(setting, dir string) (exe, skip, fail string) {
	exe, err := claudecode.Executable(setting, dir)
	switch {
	case err == nil:
		return exe, "", ""
	case errors.Is(err, claudecode.ErrNotEnabled):
		return "", "the real Claude Code CLI is opt-in: set " + claudecode.SettingEnv +
			" to a claude executable, or to 1 after `npm install` in testdata/npm (" + err.Error() + ")", ""
	default:
		return "", "", claudecode.SettingEnv + " asks for the real Claude Code CLI, but it cannot run: " + err.Error()
	}
}

// claudeOrSkip resolves the opt-in CLI, skips the spec when it is off and
// fails it when it is on but not installed.
func claudeOrSkip() string {
	exe, skip, fail := optIn(os.Getenv(claudecode.SettingEnv), npmDir())
	if fail != "" {
		Fail(fail)
	}
	if skip != "" {
		Skip(skip)
	}
	return exe
}

// seenCall is one HTTP request the CLI made to the proxy.
type seenCall struct {
	Method, Path, Script string
	// AgentID is x-claude-code-agent-id (set on sub-agent calls).
	AgentID string
	Status  int
	Body    []byte
	// Reply is the body of an error reply.
	Reply []byte
}

// callLog records every request that reaches the proxy, in arrival order.
type callLog struct {
	mu    sync.Mutex
	calls []seenCall
}

type statusWriter struct {
	http.ResponseWriter
	status int
	// errBody keeps the body of an error reply (status >= 400).
	errBody []byte
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.status >= 400 && len(w.errBody) < 64<<10 {
		w.errBody = append(w.errBody, b...)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (l *callLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		l.mu.Lock()
		l.calls = append(l.calls, seenCall{Method: r.Method, Path: r.URL.RequestURI(), Script: r.Header.Get("X-Fake-Script"),
			AgentID: r.Header.Get(vllm.AgentIDHeader), Status: sw.status, Body: body, Reply: sw.errBody})
		l.mu.Unlock()
	})
}

func (l *callLog) snapshot() []seenCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]seenCall(nil), l.calls...)
}

// upstreamLog keeps the bodies the proxy sends to the engine.
type upstreamLog struct {
	mu     sync.Mutex
	bodies []string
}

func (u *upstreamLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			u.mu.Lock()
			u.bodies = append(u.bodies, string(body))
			u.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(w, r)
	})
}

func (u *upstreamLog) snapshot() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.bodies...)
}

// rig is the fake vLLM and the capture proxy, each behind a logging server.
type rig struct {
	fake     *vllm.Server
	store    *store.FileStore
	url      string
	log      *callLog
	upstream *upstreamLog
	// dir is the working directory the CLI's tools act in.
	dir string
}

func startRig() *rig {
	fake, err := vllm.New(vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "hermes", ReasoningParser: "qwen3"})
	Expect(err).NotTo(HaveOccurred())
	fctx, cancel := context.WithCancel(context.Background())
	DeferCleanup(cancel)
	Expect(fake.Start(fctx)).To(Succeed())
	DeferCleanup(fake.Close)
	for _, s := range cliScripts {
		Expect(fake.SetScript(s)).To(Succeed())
	}
	fs, err := store.NewFileStore(GinkgoT().TempDir())
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(fs.Close)
	fakeURL, err := url.Parse(fake.URL())
	Expect(err).NotTo(HaveOccurred())
	up := &upstreamLog{}
	upSrv := httptest.NewServer(up.wrap(httputil.NewSingleHostReverseProxy(fakeURL)))
	DeferCleanup(upSrv.Close)
	p, err := proxy.New(proxy.Options{Upstream: upSrv.URL, Store: fs, Model: vllm.DefaultModel})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(p.Close)
	l := &callLog{}
	srv := httptest.NewServer(l.wrap(p.Handler()))
	DeferCleanup(srv.Close)
	return &rig{fake: fake, store: fs, url: srv.URL, log: l, upstream: up, dir: GinkgoT().TempDir()}
}

// runCLI runs claude headless for one rollout and returns its JSON result;
// the CLI must exit 0.
func (r *rig) runCLI(ctx context.Context, exe, rollout, script, prompt string, args ...string) *claudecode.Result {
	res, err := r.runCLIExit(ctx, exe, rollout, script, prompt, args...)
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		Fail("claude exited " + exit.String() + ": " + err.Error())
	}
	Expect(err).NotTo(HaveOccurred())
	return res
}

// runCLIExit runs claude headless and returns its JSON result and how it
// exited (an *exec.ExitError for a non-zero status).
func (r *rig) runCLIExit(ctx context.Context, exe, rollout, script, prompt string, args ...string) (*claudecode.Result, error) {
	cfg := claudecode.Config{
		Executable: exe,
		BaseURL:    r.url + "/ng-rollout/" + rollout + capturePath,
		Home:       GinkgoT().TempDir(),
		Dir:        r.dir,
		Headers:    map[string]string{"X-Fake-Script": script},
	}
	runCtx, cancel := context.WithTimeout(ctx, 50*time.Second)
	defer cancel()
	cmd := cfg.Command(runCtx, prompt, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, runErr := cmd.Output()
	GinkgoWriter.Printf("claude stdout:\n%s\nclaude stderr:\n%s\n", stdout, stderr.String())
	for _, c := range r.log.snapshot() {
		GinkgoWriter.Printf("call seen by the proxy: %s %s script=%q agent=%q status=%d body=%d bytes\n", c.Method, c.Path, c.Script, c.AgentID, c.Status, len(c.Body))
	}
	for i, b := range r.upstream.snapshot() {
		GinkgoWriter.Printf("engine request %d: %s\n", i+1, chatShape(b))
	}
	res, err := claudecode.ParseResult(stdout)
	Expect(err).NotTo(HaveOccurred(), "stdout %s; stderr %s; exit %v", stdout, stderr.String(), runErr)
	if runErr != nil {
		runErr = fmt.Errorf("%w: %s%s", runErr, stdout, stderr.String())
	}
	return res, runErr
}

// ledger converts the fake's ledger to the harness's ground-truth type.
func (r *rig) ledger() []env.LedgerEntry {
	var out []env.LedgerEntry
	for _, l := range r.fake.Ledger() {
		out = append(out, env.LedgerEntry{RequestID: l.RequestID, Model: l.Model, PromptTokenIDs: l.PromptTokenIDs,
			GeneratedTokenIDs: l.GeneratedTokenIDs, LogProbs: l.LogProbs, FinishReason: l.FinishReason, Text: l.Text})
	}
	return out
}

// finalize freezes the rollout, checks every record against the ledger bit
// for bit and runs delivery on a record built the way the harness builds
// one (rollout id, the CLI's final text as the response).
func (r *rig) finalize(ctx context.Context, rollout string, res *claudecode.Result) (*store.Snapshot, consumer.Rollout, *consumer.Result) {
	GinkgoHelper()
	snap, rec, final := r.finalizeAny(ctx, rollout, res)
	Expect(final.Metrics.TerminalAttribution.Chain).To(Equal(consumer.ChainDelivered))
	return snap, rec, final
}

// finalizeAny is finalize without the demand that the attributed chain was
// delivered (for rollouts that must come out masked).
func (r *rig) finalizeAny(ctx context.Context, rollout string, res *claudecode.Result) (*store.Snapshot, consumer.Rollout, *consumer.Result) {
	GinkgoHelper()
	snap, err := r.store.Freeze(ctx, rollout)
	Expect(err).NotTo(HaveOccurred())
	Expect(snap.Incomplete).To(BeFalse(), "the rollout was marked incomplete")
	rec := consumer.Rollout{
		consumer.KeyRolloutID: rollout,
		consumer.KeyResponse: map[string]any{"id": "", "object": "response", "model": vllm.DefaultModel,
			"output": []any{map[string]any{"type": "message", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": res.Result}}}}},
	}
	built := consumer.ConsumeSnapshot(snap, consumer.InputFromRollout(rec), consumer.DefaultOptions())
	fid := harness.CheckFidelity(snap, r.ledger(), built.RebuiltResponse)
	Expect(fid.OK()).To(BeTrue(), "fidelity %s: %v", fid.Summary(), fid.Problems)
	Expect(fid.Matched).To(Equal(len(snap.Entries)))
	// Every generation the engine made was captured (no call bypassed capture).
	Expect(r.fake.Ledger()).To(HaveLen(len(snap.Entries)))
	final := consumer.Finalize(ctx, rec, r.store, consumer.DefaultOptions())
	Expect(final).NotTo(BeNil())
	Expect(final.Metrics.TerminalAttribution).NotTo(BeNil())
	metrics, err := json.Marshal(final.Metrics)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("consumer: mask=%v error=%q _ng_token_capture=%s\n", final.MaskSample, final.Error, metrics)
	return snap, rec, final
}

// messageCalls are the POST /v1/messages calls of the log, with the others
// returned apart.
func messageCalls(calls []seenCall, rollout string) (messages, other []seenCall) {
	for _, c := range calls {
		if c.Method == http.MethodPost && strings.HasPrefix(c.Path, "/ng-rollout/"+rollout+capturePath+messagesPath) {
			messages = append(messages, c)
		} else {
			other = append(other, c)
		}
	}
	return messages, other
}

func resolution(e *record.Entry) record.Resolution {
	if e.ParentResolution == nil {
		return ""
	}
	return *e.ParentResolution
}

var _ = Describe("the real Claude Code CLI through the capture proxy and the fake vLLM", Label("claude-code", "slow"), func() {
	var exe string
	var r *rig
	BeforeEach(func() {
		exe = claudeOrSkip()
		r = startRig()
	})

	It("says hi: one captured main call, bit for bit, unmasked", func(ctx SpecContext) {
		res := r.runCLI(ctx, exe, "cc-say-hi", "say-hi", "say hi")
		Expect(res.IsError).To(BeFalse())
		Expect(res.Subtype).To(Equal("success"))
		Expect(res.Result).To(Equal(hiText))

		msgs, other := messageCalls(r.log.snapshot(), "cc-say-hi")
		Expect(msgs).To(HaveLen(1))
		Expect(msgs[0].Path).To(HaveSuffix("?beta=true"))
		Expect(msgs[0].Script).To(Equal("say-hi"), "ANTHROPIC_CUSTOM_HEADERS reached the proxy")
		Expect(msgs[0].Status).To(Equal(http.StatusOK))
		for _, c := range other {
			// Probes may come and go between releases; they must never fail the run or be captured.
			Expect(c.Method).To(Equal(http.MethodHead), "an unexpected non-probe call: %+v", c)
		}

		snap, rec, final := r.finalize(ctx, "cc-say-hi", res)
		Expect(snap.Entries).To(HaveLen(1))
		Expect(resolution(snap.Entries[0])).To(Equal(record.ResolutionRoot))
		Expect(final.MaskSample).To(BeFalse(), "masked: %s", consumer.MaskExplanation(final))
		Expect(final.Error).To(BeEmpty())
		Expect(rec).NotTo(HaveKey(consumer.KeyMaskSample))
		Expect(final.Metrics.NCalls).To(Equal(1))
	}, SpecTimeout(time.Minute))

	DescribeTable("a Bash tool round trip: the CLI runs the tool, two calls chain into one clean, unmasked trajectory",
		func(ctx SpecContext, rollout, script, wantText string, thinking bool) {
			res := r.runCLI(ctx, exe, rollout, script, "run echo capbench", "--allowedTools", "Bash")
			Expect(res.IsError).To(BeFalse())
			Expect(res.Subtype).To(Equal("success"))
			Expect(res.Result).To(Equal(wantText))
			Expect(res.PermissionDenials).To(BeEmpty())
			Expect(res.NumTurns).To(Equal(2))

			msgs, other := messageCalls(r.log.snapshot(), rollout)
			Expect(msgs).To(HaveLen(2))
			for _, c := range msgs {
				Expect(c.Status).To(Equal(http.StatusOK))
				Expect(c.Script).To(Equal(script))
			}
			for _, c := range other {
				Expect(c.Method).To(Equal(http.MethodHead), "an unexpected non-probe call: %+v", c)
			}

			By("checking the assistant turn the CLI sent back")
			Expect(assistantBlocks(msgs[0].Body)).To(BeEmpty())
			echoed := assistantBlocks(msgs[1].Body)
			GinkgoWriter.Printf("assistant turn echoed by the CLI: %v\n", echoed)
			if thinking {
				Expect(echoed).To(HaveLen(2))
				Expect(echoed[0]).To(HaveKeyWithValue("type", "thinking"))
				// The qwen3 parser keeps the newlines around the text inside <think>.
				Expect(echoed[0]).To(HaveKeyWithValue("thinking", WithTransform(strings.TrimSpace, Equal(thinkText))))
				Expect(echoed[0]).To(HaveKeyWithValue("signature", Not(BeEmpty())))
				echoed = echoed[1:]
			}
			Expect(echoed).To(HaveLen(1))
			Expect(echoed[0]).To(HaveKeyWithValue("type", "tool_use"))
			Expect(echoed[0]).To(HaveKeyWithValue("name", "Bash"))
			Expect(echoed[0]).To(HaveKeyWithValue("input", HaveKeyWithValue("command", "echo capbench")))

			By("checking the tool really ran: its output is in the second engine prompt")
			bodies := r.upstream.snapshot()
			Expect(bodies).To(HaveLen(2))
			Expect(toolMessages(bodies[0])).To(BeEmpty())
			Expect(toolMessages(bodies[1])).To(ConsistOf(HavePrefix("capbench")))

			By("checking capture: bit for bit, chained, unmasked")
			snap, rec, final := r.finalize(ctx, rollout, res)
			Expect(snap.Entries).To(HaveLen(2))
			var root, child *record.Entry
			for _, e := range snap.Entries {
				if resolution(e) == record.ResolutionRoot {
					root = e
				} else {
					child = e
				}
			}
			Expect(root).NotTo(BeNil(), "no root call")
			Expect(child).NotTo(BeNil(), "no follow-up call")
			Expect(resolution(child)).To(Equal(record.ResolutionResolved), child.ParentResolutionReason)
			Expect(child.ParentCallID).To(HaveValue(Equal(root.ModelCallID)))
			Expect(child.PromptTokenIDs[:len(root.PromptTokenIDs)]).To(Equal(root.PromptTokenIDs))
			Expect(final.MaskSample).To(BeFalse(), "masked: %s", consumer.MaskExplanation(final))
			Expect(final.Error).To(BeEmpty())
			Expect(rec).NotTo(HaveKey(consumer.KeyMaskSample))
			Expect(final.Metrics.NCalls).To(Equal(2))
			Expect(final.Metrics.Chains).To(Equal(1), "one clean chain")
			Expect(final.Metrics.DeliveredFraction).To(Equal(1.0))
		},
		Entry("text and a tool call", "cc-bash", "bash-echo", toolText, false, SpecTimeout(time.Minute)),
		// Claude Code asks for adaptive thinking by default; the engine's
		// reasoning reaches the CLI as a signed thinking block and comes
		// back whole in the follow-up, which must not break the chain.
		Entry("thinking, then a tool call", "cc-think", "think-bash", thinkAnswer, true, SpecTimeout(time.Minute)),
	)
})

// assistantBlocks returns the content blocks of the assistant messages of a
// Messages request body, in order.
func assistantBlocks(body []byte) []map[string]any {
	GinkgoHelper()
	var out []map[string]any
	for _, m := range requestMessages(body) {
		if m.Role != "assistant" {
			continue
		}
		var blocks []map[string]any
		Expect(json.Unmarshal(m.Content, &blocks)).To(Succeed(), string(m.Content))
		out = append(out, blocks...)
	}
	return out
}

// toolMessages returns the content of the role:tool messages of a chat
// completions body.
func toolMessages(body string) []string {
	GinkgoHelper()
	var out []string
	for _, m := range requestMessages([]byte(body)) {
		if m.Role == "tool" {
			var text string
			if json.Unmarshal(m.Content, &text) != nil {
				text = string(m.Content)
			}
			out = append(out, text)
		}
	}
	return out
}

// chatShape summarises a chat completions body for the log: the model, the
// token limit and the roles of its messages.
func chatShape(body string) string {
	var req struct {
		Model     string `json:"model"`
		MaxTokens *int   `json:"max_tokens"`
		Messages  []struct {
			Role string `json:"role"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.Unmarshal([]byte(body), &req); err != nil {
		return "undecodable: " + err.Error()
	}
	roles := make([]string, len(req.Messages))
	for i, m := range req.Messages {
		roles[i] = m.Role
	}
	maxTokens := "unset"
	if req.MaxTokens != nil {
		maxTokens = strconv.Itoa(*req.MaxTokens)
	}
	return fmt.Sprintf("model=%s max_tokens=%s tools=%d roles=%v (%d bytes)", req.Model, maxTokens, len(req.Tools), roles, len(body))
}
