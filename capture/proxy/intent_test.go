package proxy_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// intentLog is a file store that logs its intent and put operations in
// order, with how many generations the engine had been asked for at each, and
// can hold or fail SyncIntents.
type intentLog struct {
	*store.FileStore
	up *stubVLLM

	mu       sync.Mutex
	events   []string
	syncErr  error
	syncGate chan struct{} // when set, SyncIntents waits for it to close
}

func (l *intentLog) log(op string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, fmt.Sprintf("%s@%d", op, len(l.up.generations())))
}

func (l *intentLog) seen() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

func (l *intentLog) WriteIntent(ctx context.Context, rolloutID, callID string) error {
	l.log("write_intent")
	return l.FileStore.WriteIntent(ctx, rolloutID, callID)
}

func (l *intentLog) SyncIntents(ctx context.Context, rolloutID string) error {
	l.mu.Lock()
	gate, err := l.syncGate, l.syncErr
	l.mu.Unlock()
	if gate != nil {
		<-gate
	}
	l.log("sync_intents")
	if err != nil {
		return err
	}
	return l.FileStore.SyncIntents(ctx, rolloutID)
}

func (l *intentLog) PutCanonical(ctx context.Context, e *record.Entry, canonical []byte) (string, error) {
	l.log("put")
	return l.FileStore.PutCanonical(ctx, e, canonical)
}

var _ = Describe("call intents written ahead of their durability (file store)", func() {
	const rollout = "ia"
	chatPath := "/ng-rollout/" + rollout + "/training-token-capture/v1/chat/completions"
	plain := mustJSON(map[string]any{"messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	streamed := mustJSON(map[string]any{"stream": true, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	var (
		up  *stubVLLM
		st  *intentLog
		url string
		dir string
	)
	BeforeEach(func(ctx SpecContext) {
		up = newStubVLLM()
		DeferCleanup(up.Close)
		dir = GinkgoT().TempDir()
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		st = &intentLog{FileStore: fs, up: up}
		url = startProxy(context.Background(), up.URL(), st, nil).URL() + chatPath
	})
	intentsOnDisk := func() string {
		b, err := os.ReadFile(filepath.Join(dir, rollout+".tokens.intents"))
		Expect(err).NotTo(HaveOccurred())
		return string(b)
	}

	It("writes the intent before the engine call and syncs nothing more than the record when the call is recorded", func(ctx SpecContext) {
		r := do(ctx, "POST", url, plain, nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		Expect(st.seen()).To(Equal([]string{"write_intent@0", "put@1"}))
		Expect(strings.Count(intentsOnDisk(), "\n")).To(Equal(1))
		Expect(entries(ctx, st, rollout)).To(HaveLen(1))
		Expect(incomplete(ctx, st, rollout)).To(BeFalse())
	})

	// heldUntilSynced sends body with SyncIntents held, checks that no reply
	// (not even its status line) arrives while it is held, then releases it
	// and returns the reply.
	heldUntilSynced := func(ctx context.Context, body []byte) reply {
		GinkgoHelper()
		gate := make(chan struct{})
		st.mu.Lock()
		st.syncGate = gate
		st.mu.Unlock()
		headers := make(chan *http.Response, 1)
		go func() {
			defer GinkgoRecover()
			req, err := http.NewRequestWithContext(ctx, "POST", url, bytes.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			headers <- resp
		}()
		Eventually(up.generations).Should(HaveLen(1))
		Consistently(headers, 300*time.Millisecond).ShouldNot(Receive())
		close(gate)
		var resp *http.Response
		Eventually(headers).Should(Receive(&resp))
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}

	DescribeTable("makes the intent durable before answering a call that left no record",
		func(ctx SpecContext, reply stubReply, wantStatus int) {
			up.script(reply)
			r := heldUntilSynced(ctx, plain)
			Expect(r.Status).To(Equal(wantStatus), string(r.Body))
			Expect(st.seen()).To(Equal([]string{"write_intent@0", "sync_intents@1"}))
			Expect(incomplete(ctx, st, rollout)).To(BeTrue())
		},
		Entry("an engine error", stubReply{Status: 500, ErrBody: `{"error":{"message":"boom"}}`}, 500),
		Entry("a reply without token ids", stubReply{Content: "fine", NoLogprob: true}, 200),
	)

	It("syncs a streamed call's intent beside the engine call and sends no byte before it is durable", func(ctx SpecContext) {
		r := heldUntilSynced(ctx, streamed)
		Expect(r.Status).To(Equal(200))
		Expect(eventNames(parseSSE(r.Body))).NotTo(BeEmpty())
		Expect(st.seen()).To(ConsistOf("write_intent@0", HavePrefix("sync_intents@"), "put@1"))
		Expect(entries(ctx, st, rollout)).To(HaveLen(1))
	})

	DescribeTable("withholds the reply with a retryable 503 when the intent cannot be made durable",
		func(ctx SpecContext, body []byte, reply stubReply) {
			up.script(reply)
			st.mu.Lock()
			st.syncErr = &store.WriteError{Path: dir, Op: "fsync", Err: syscall.EIO}
			st.mu.Unlock()
			r := do(ctx, "POST", url, body, nil)
			Expect(r.Status).To(Equal(http.StatusServiceUnavailable), string(r.Body))
			Expect(string(r.Body)).To(ContainSubstring(`could not make the call intent of rollout \"ia\" durable (input/output error)`))
			Expect(string(r.Body)).NotTo(ContainSubstring(dir), "the client is not told the store's paths")
			Expect(string(r.Body)).NotTo(ContainSubstring("data:"))
			Expect(r.Header.Get("X-Should-Retry")).To(BeEmpty())
		},
		Entry("after an engine error", plain, stubReply{Status: 500, ErrBody: `{"error":{"message":"boom"}}`}),
		Entry("on a stream, before its first event", streamed, stubReply{Content: "hello there"}),
	)

	It("answers a recorded call even when a sync of its intent alone would have failed", func(ctx SpecContext) {
		st.mu.Lock()
		st.syncErr = &store.WriteError{Path: dir, Op: "fsync", Err: syscall.EIO}
		st.mu.Unlock()
		r := do(ctx, "POST", url, plain, nil)
		Expect(r.Status).To(Equal(200), string(r.Body))
		Expect(entries(ctx, st, rollout)).To(HaveLen(1))
	})

	It("refuses a frozen rollout's call before the engine, as begin_call does", func(ctx SpecContext) {
		_, err := st.Freeze(ctx, rollout)
		Expect(err).NotTo(HaveOccurred())
		r := do(ctx, "POST", url, plain, nil)
		Expect(r.Status).To(Equal(410), string(r.Body))
		Expect(up.generations()).To(BeEmpty())
	})
})
