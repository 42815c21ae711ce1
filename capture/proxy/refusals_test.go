package proxy_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

// failingBegin is a store whose begin_call fails with err.
type failingBegin struct {
	*store.MemoryStore
	err error
}

func (f failingBegin) BeginCall(context.Context, string, string) error { return f.err }

// SDK retry rule of both official clients (openai, @anthropic-ai/sdk).
func sdkRetries(status int, hdr map[string][]string) bool {
	if v := hdr["X-Should-Retry"]; len(v) > 0 {
		return v[0] == "true"
	}
	return status == 408 || status == 409 || status == 429 || status >= 500
}

var _ = Describe("refused calls answer what a harness does not retry, and say what to do", func() {
	const rollout = "rf-1"
	chat := mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	messages := mustJSON(map[string]any{"model": "m", "max_tokens": 10, "stream": true, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})

	DescribeTable("begin_call refusals",
		func(ctx SpecContext, prepare func(context.Context, *store.MemoryStore) proxy.Store, path string, body []byte,
			wantStatus int, wantRetried bool, wantEnvelope string, wantText []string) {
			up := newStubVLLM()
			DeferCleanup(up.Close)
			mem := store.NewMemoryStore()
			p := startProxy(ctx, up.URL(), prepare(ctx, mem), nil)
			r := do(ctx, "POST", p.URL()+"/ng-rollout/"+rollout+"/training-token-capture"+path, body, nil)
			Expect(r.Status).To(Equal(wantStatus), string(r.Body))
			Expect(sdkRetries(r.Status, r.Header)).To(Equal(wantRetried))
			env := r.JSON()
			if wantEnvelope == "anthropic" {
				Expect(env).To(HaveKeyWithValue("type", "error"))
			}
			msg := env["error"].(map[string]any)["message"].(string)
			for _, t := range wantText {
				Expect(msg).To(ContainSubstring(t))
			}
			Expect(msg).NotTo(ContainSubstring("/tmp"))
			Expect(up.generations()).To(BeEmpty(), "a refused call must not reach the engine")
		},
		Entry("frozen rollout, Messages", frozen, "/v1/messages", messages, 410, false, "anthropic",
			[]string{`rollout "rf-1" is frozen`, "new rollout id", "after it has ended"}),
		Entry("frozen rollout, chat", frozen, "/v1/chat/completions", chat, 410, false, "openai",
			[]string{`rollout "rf-1" is frozen`, "new rollout id"}),
		Entry("retired rollout, Messages", retired, "/v1/messages", messages, 410, false, "anthropic",
			[]string{`rollout "rf-1" is retired`, "new rollout id"}),
		Entry("unwritable store, Messages", failing(&fs.PathError{Op: "open", Path: "/tmp/cap/rf-1.jsonl", Err: syscall.EACCES}),
			"/v1/messages", messages, 424, false, "anthropic", []string{`rollout "rf-1"`, "permission denied", "--capture-dir is writable"}),
		Entry("read-only store, Responses", failing(&fs.PathError{Op: "open", Path: "/tmp/cap/x", Err: syscall.EROFS}),
			"/v1/responses", mustJSON(map[string]any{"input": "hi"}), 424, false, "openai", []string{"read-only file system"}),
		Entry("full disk: transient, retried after Retry-After", failing(fmt.Errorf("writing intent: %w", &fs.PathError{Op: "write", Path: "/tmp/cap/x", Err: syscall.ENOSPC})),
			"/v1/messages", messages, 503, true, "anthropic", []string{"disk is full", `rollout "rf-1"`}),
	)

	It("refuses without a retry when the file store cannot write the rollout's files", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		dir := GinkgoT().TempDir()
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		// A directory where the rollout's intents file belongs: every open fails.
		Expect(os.Mkdir(filepath.Join(dir, "rf-1.tokens.intents"), 0o700)).To(Succeed())
		p := startProxy(ctx, up.URL(), fs, nil)
		r := do(ctx, "POST", p.URL()+"/ng-rollout/rf-1/training-token-capture/v1/messages", messages, nil)
		Expect(r.Status).To(BeNumerically(">=", 400), string(r.Body))
		Expect(sdkRetries(r.Status, r.Header)).To(BeFalse(), string(r.Body))
		Expect(string(r.Body)).To(ContainSubstring(`rollout \"rf-1\"`))
		Expect(string(r.Body)).NotTo(ContainSubstring(dir))
		Expect(up.generations()).To(BeEmpty())
	})

	It("gives full-disk refusals a Retry-After", func(ctx SpecContext) {
		up := newStubVLLM()
		DeferCleanup(up.Close)
		p := startProxy(ctx, up.URL(), failing(syscall.ENOSPC)(ctx, store.NewMemoryStore()), nil)
		r := do(ctx, "POST", p.URL()+"/ng-rollout/x/training-token-capture/v1/chat/completions", chat, nil)
		Expect(r.Status).To(Equal(503))
		Expect(r.Header.Get("Retry-After")).To(Equal("10"))
	})

	DescribeTable("unknown routes say which routes exist",
		func(ctx SpecContext, path string, anthropicEnvelope bool, wantText []string) {
			up := newStubVLLM()
			DeferCleanup(up.Close)
			p := startProxy(ctx, up.URL(), store.NewMemoryStore(), nil)
			r := do(ctx, "POST", p.URL()+path, messages, nil)
			Expect(r.Status).To(Equal(404), string(r.Body))
			env := r.JSON()
			if anthropicEnvelope {
				Expect(env).To(HaveKeyWithValue("type", "error"))
				Expect(env["error"]).To(HaveKeyWithValue("type", "not_found_error"))
			}
			msg := env["error"].(map[string]any)["message"].(string)
			for _, t := range wantText {
				Expect(msg).To(ContainSubstring(t))
			}
			Expect(up.requests()).To(BeEmpty())
		},
		Entry("a base URL ending in /v1 (Claude Code appends /v1/messages)", "/ng-rollout/r/training-token-capture/v1/v1/messages?beta=true", true,
			[]string{"/v1 twice", "Remove the trailing /v1", "ANTHROPIC_BASE_URL="}),
		Entry("the same without a rollout prefix", "/v1/v1/messages", true, []string{"/v1 twice"}),
		Entry("an unknown path under the training prefix", "/ng-rollout/r/training-token-capture/v1/embeddings", false,
			[]string{`"/v1/embeddings"`, "/v1/chat/completions", "/v1/messages", "/v1/responses"}),
		Entry("an OpenAI base URL without /v1", "/ng-rollout/r/training-token-capture/chat/completions", false,
			[]string{"must end in /v1 for OpenAI clients"}),
	)
})

func frozen(ctx context.Context, m *store.MemoryStore) proxy.Store {
	_, err := m.Freeze(ctx, "rf-1")
	Expect(err).NotTo(HaveOccurred())
	return m
}

func retired(ctx context.Context, m *store.MemoryStore) proxy.Store {
	snap, err := m.Freeze(ctx, "rf-1")
	Expect(err).NotTo(HaveOccurred())
	_, err = m.Drop(ctx, "rf-1", snap.SnapshotID, snap.Version)
	Expect(err).NotTo(HaveOccurred())
	return m
}

func failing(err error) func(context.Context, *store.MemoryStore) proxy.Store {
	return func(_ context.Context, m *store.MemoryStore) proxy.Store { return failingBegin{m, err} }
}
