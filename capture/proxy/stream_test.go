package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
)

// normalizedRecord is a record's canonical bytes with what differs between
// two generations of the same script set to fixed values: call ids, times,
// and the ids the engine and the proxy mint per reply.
func normalizedRecord(e *record.Entry) string {
	GinkgoHelper()
	c := *e
	// The continuation fingerprint hashes the tool call ids, which the
	// engine mints per generation.
	c.ModelCallID, c.CreatedAt, c.ContinuationFingerprint = "call", 0, "fp"
	if c.ResponseID != nil {
		id := "response"
		c.ResponseID = &id
	}
	items := make([]record.Item, len(c.OutputItems))
	for i, it := range c.OutputItems {
		items[i] = normalizeIDs(map[string]any(it)).(map[string]any)
	}
	c.OutputItems = items
	b, err := c.MarshalCanonical()
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

func normalizeIDs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, val := range x {
			if _, isString := val.(string); isString && (k == "id" || k == "call_id") {
				out[k] = "<id>"
				continue
			}
			out[k] = normalizeIDs(val)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalizeIDs(x[i])
		}
		return out
	}
	return v
}

var writeSchema = map[string]any{"type": "object", "properties": map[string]any{
	"file_path": map[string]any{"type": "string"}, "content": map[string]any{"type": "string"}}}

// requestFor is one stream:true request of a dialect offering the Write tool.
func requestFor(path string) map[string]any {
	user := map[string]any{"role": "user", "content": "write the notes"}
	switch path {
	case "/v1/messages":
		return map[string]any{"model": "policy", "max_tokens": 300, "stream": true, "messages": []any{user},
			"tools": []any{map[string]any{"name": "Write", "input_schema": writeSchema}}}
	case "/v1/responses":
		return map[string]any{"model": "policy", "stream": true, "input": "write the notes",
			"tools": []any{map[string]any{"type": "function", "name": "Write", "parameters": writeSchema}}}
	default:
		return map[string]any{"model": "policy", "stream": true, "messages": []any{user},
			"tools": []any{map[string]any{"type": "function", "function": map[string]any{"name": "Write", "parameters": writeSchema}}}}
	}
}

var equalityTurns = map[string]vllm.Turn{
	"text":               {Content: "Hello there, how can I help you today?"},
	"reasoning and text": {Reasoning: "The user wants notes.", Content: "Here they are."},
	"a tool call":        {ToolCalls: []vllm.ScriptToolCall{{Name: "Write", Arguments: `{"file_path": "/w/n.txt", "content": "a\nb"}`}}},
	"text before a call": {Content: "Let me write that.", ToolCalls: []vllm.ScriptToolCall{{Name: "Write", Arguments: `{"file_path": "/w/n.txt", "content": "x"}`}}},
	"reasoning and a call": {Reasoning: "I should write.", ToolCalls: []vllm.ScriptToolCall{
		{Name: "Write", Arguments: `{"file_path": "/a", "content": "1"}`}, {Name: "Write", Arguments: `{"file_path": "/b", "content": "2"}`}}},
	"an empty generation": {Empty: true},
	"a length stop":       {Content: "one two three four five six seven eight nine ten", Tokens: 5, StopByLength: true},
}

func startReasoningFake(opts vllm.Options) *vllm.Server {
	GinkgoHelper()
	opts.ServedModelNames = []string{"policy"}
	opts.EnableAutoToolChoice, opts.ToolCallParser, opts.ReasoningParser = true, "hermes", "qwen3"
	f, err := vllm.New(opts)
	Expect(err).NotTo(HaveOccurred())
	Expect(f.Start(context.Background())).To(Succeed())
	DeferCleanup(f.Close)
	return f
}

var _ = Describe("streaming pass-through", func() {
	var routes = []string{"/v1/chat/completions", "/v1/messages", "/v1/responses"}

	for _, path := range routes {
		for name, turn := range equalityTurns {
			It("records "+name+" on "+path+" byte for byte as the buffered path does", func(ctx SpecContext) {
				fake := startReasoningFake(vllm.Options{})
				Expect(fake.SetScript(vllm.Script{Name: "eq", Turns: []vllm.Turn{turn}})).To(Succeed())
				hdr := map[string]string{"X-Fake-Script": "eq"}
				var recs []*record.Entry
				var replies [][]byte
				for _, buffered := range []bool{false, true} {
					st := store.NewMemoryStore()
					p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.BufferedStreams = buffered })
					r := do(ctx, "POST", p.URL()+"/ng-rollout/eq/training-token-capture"+path, mustJSON(requestFor(path)), hdr)
					Expect(r.Status).To(Equal(200), string(r.Body))
					Expect(r.Header.Get("Content-Type")).To(HavePrefix("text/event-stream"))
					Expect(tokenKeysIn(r.Body)).To(BeFalse(), string(r.Body))
					es := entries(ctx, st, "eq")
					Expect(es).To(HaveLen(1))
					Expect(incomplete(ctx, st, "eq")).To(BeFalse())
					recs = append(recs, es[0])
					replies = append(replies, r.Body)
				}
				led := ledgerOf(fake, 2)
				matchesLedger(recs[0], led[0])
				Expect(normalizedRecord(recs[0])).To(Equal(normalizedRecord(recs[1])))
				if path == "/v1/messages" {
					streamed, _ := anthropicMessage(replies[0])
					buffered, _ := anthropicMessage(replies[1])
					Expect(normalizedMessage(streamed)).To(Equal(normalizedMessage(buffered)))
				}
			})
		}
	}

	DescribeTable("relays the engine's chat chunks byte for byte apart from the token fields", func(ctx SpecContext, turn string, streamOptions map[string]any) {
		fake := startReasoningFake(vllm.Options{})
		Expect(fake.SetScript(vllm.Script{Name: "eq", Turns: []vllm.Turn{equalityTurns[turn]}})).To(Succeed())
		p := startProxy(ctx, fake.URL(), store.NewMemoryStore(), nil)
		req := requestFor("/v1/chat/completions")
		if streamOptions != nil {
			req["stream_options"] = streamOptions
		}
		body := mustJSON(req)
		hdr := map[string]string{"X-Fake-Script": "eq"}
		direct := parseSSE(do(ctx, "POST", fake.URL()+"/v1/chat/completions", body, hdr).Body)
		via := parseSSE(do(ctx, "POST", p.URL()+"/ng-rollout/b4b/training-token-capture/v1/chat/completions", body, hdr).Body)
		// Only what the engine mints per generation differs: the id, and the
		// creation second (the two generations may straddle a second).
		norm := func(evs []sseEvent) []string {
			var out []string
			for _, ev := range evs {
				d := idPattern.ReplaceAllString(ev.Data, `"<id>"`)
				out = append(out, createdPattern.ReplaceAllString(d, `"created":0`))
			}
			return out
		}
		Expect(norm(via)).To(Equal(norm(direct)))
		Expect(len(via)).To(BeNumerically(">=", 3))
	},
		Entry("a call after text", "text before a call", nil),
		Entry("reasoning and text, with the usage chunk", "reasoning and text", map[string]any{"include_usage": true}),
		Entry("reasoning and two calls, with running usage", "reasoning and a call", map[string]any{"include_usage": true, "continuous_usage_stats": true}),
		Entry("an empty generation", "an empty generation", nil),
	)

	DescribeTable("the client gets its first event while the engine is still generating",
		func(ctx SpecContext, path string) {
			fake := startReasoningFake(vllm.Options{Timing: vllm.Timing{InterTokenLatency: 20 * time.Millisecond}})
			Expect(fake.SetScript(vllm.Script{Name: "slow", Turns: []vllm.Turn{{Content: strings.Repeat("word ", 30)}}})).To(Succeed())
			st := store.NewMemoryStore()
			p := startProxy(ctx, fake.URL(), st, nil)
			first, total := timeStream(ctx, p.URL()+"/ng-rollout/ft/training-token-capture"+path, mustJSON(requestFor(path)), map[string]string{"X-Fake-Script": "slow"})
			Expect(total).To(BeNumerically(">", 400*time.Millisecond), "the generation must take a while for this to mean anything")
			Expect(first).To(BeNumerically("<", total/4))
			Expect(entries(ctx, st, "ft")).To(HaveLen(1))
		},
		Entry("chat", "/v1/chat/completions"),
		Entry("messages", "/v1/messages"),
		Entry("responses", "/v1/responses"),
	)

	DescribeTable("an engine stream cut mid-way cuts the client's and marks the rollout incomplete",
		func(ctx SpecContext, path, fault string, wantCut bool, wantTail string) {
			fake := startReasoningFake(vllm.Options{})
			st := store.NewMemoryStore()
			p := startProxy(ctx, fake.URL(), st, nil)
			status, got, err := readAllErr(ctx, p.URL()+"/ng-rollout/cut/training-token-capture"+path, mustJSON(requestFor(path)),
				map[string]string{"X-Fake-Fault": fault})
			Expect(status).To(Equal(200))
			if wantCut {
				Expect(err).To(MatchError(io.ErrUnexpectedEOF))
			} else {
				Expect(err).NotTo(HaveOccurred())
			}
			Expect(string(got)).To(ContainSubstring(wantTail))
			Expect(entries(ctx, st, "cut")).To(BeEmpty())
			Expect(incomplete(ctx, st, "cut")).To(BeTrue())
		},
		Entry("chat, dropped connection", "/v1/chat/completions", vllm.FaultDropMidStream, true, "data: "),
		Entry("messages, dropped connection", "/v1/messages", vllm.FaultDropMidStream, true, "message_start"),
		Entry("responses, dropped connection", "/v1/responses", vllm.FaultDropMidStream, true, "response.created"),
		Entry("chat, engine error frame: passed on as vLLM sent it", "/v1/chat/completions", vllm.FaultStreamError, false,
			`data: {"error": {"message": "Internal server error", "type": "InternalServerError", "param": null, "code": 500}}`+"\n\ndata: [DONE]"),
		Entry("messages, engine error frame: an error event", "/v1/messages", vllm.FaultStreamError, false, "event: error"),
		Entry("responses, engine error frame: an error event", "/v1/responses", vllm.FaultStreamError, false, "event: error"),
	)
})

var _ = Describe("streaming outside training capture", func() {
	DescribeTable("streams without recording anything",
		func(ctx SpecContext, prefix, path string, wantLast string) {
			fake := startReasoningFake(vllm.Options{})
			st := store.NewMemoryStore()
			p := startProxy(ctx, fake.URL(), st, nil)
			r := do(ctx, "POST", p.URL()+prefix+path, mustJSON(requestFor(path)), nil)
			Expect(r.Status).To(Equal(200), string(r.Body))
			evs := parseSSE(r.Body)
			Expect(evs).NotTo(BeEmpty())
			Expect(evs[len(evs)-1].Event + evs[len(evs)-1].Data).To(ContainSubstring(wantLast))
			ids, err := st.Rollouts(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(ids).To(BeEmpty())
		},
		Entry("Messages, plain", "", "/v1/messages", "message_stop"),
		Entry("Messages, summary prefix", "/ng-rollout/s2", "/v1/messages", "message_stop"),
		Entry("Responses, plain", "", "/v1/responses", "response.completed"),
	)

	It("marks the rollout incomplete when the client goes away mid-stream", func(ctx SpecContext) {
		fake := startReasoningFake(vllm.Options{Timing: vllm.Timing{InterTokenLatency: 10 * time.Millisecond}})
		Expect(fake.SetScript(vllm.Script{Name: "slow", Turns: []vllm.Turn{{Content: strings.Repeat("word ", 60)}}})).To(Succeed())
		st := store.NewMemoryStore()
		p := startProxy(ctx, fake.URL(), st, nil)
		cctx, cancel := context.WithCancel(ctx)
		req, err := http.NewRequestWithContext(cctx, http.MethodPost, p.URL()+"/ng-rollout/gone/training-token-capture/v1/messages",
			bytes.NewReader(mustJSON(requestFor("/v1/messages"))))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Fake-Script", "slow")
		resp, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		_, err = bufio.NewReader(resp.Body).ReadString('\n') // the stream has started
		Expect(err).NotTo(HaveOccurred())
		cancel()
		_ = resp.Body.Close()
		Eventually(func() bool { return incomplete(ctx, st, "gone") }).WithTimeout(5 * time.Second).Should(BeTrue())
		Expect(entries(ctx, st, "gone")).To(BeEmpty())
	})
})

// normalizedMessage drops what is random in a Messages reply.
func normalizedMessage(m map[string]any) any {
	delete(m, "id")
	if blocks, ok := m["content"].([]any); ok {
		for _, b := range blocks {
			if blk, ok := b.(map[string]any); ok {
				delete(blk, "signature")
			}
		}
	}
	return normalizeIDs(m)
}

// timeStream reads a streamed reply and returns when its first event and
// its end arrived.
func timeStream(ctx SpecContext, url string, body []byte, hdr map[string]string) (first, total time.Duration) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadString('\n')
		if strings.HasPrefix(line, "data: ") && first == 0 {
			first = time.Since(start)
		}
		if err != nil {
			Expect(err).To(MatchError(io.EOF))
			return first, time.Since(start)
		}
	}
}

var (
	idPattern      = regexp.MustCompile(`"chatcmpl-[A-Za-z0-9-]+"`)
	createdPattern = regexp.MustCompile(`"created":[0-9]+`)
)
