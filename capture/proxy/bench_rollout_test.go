package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/internal/stats"
	"github.com/capbench/capbench/internal/syncfloor"
)

// postTimed posts body and returns the call's wall time, and the decoded
// reply when decode is set. A reply nobody reads is not decoded: the direct
// reply carries the whole prompt's ids, and decoding it would fill the
// shared heap with garbage whose collection lands on the next timed calls.
func postTimed(b *testing.B, client *http.Client, url string, body []byte, decode bool) (map[string]any, time.Duration) {
	b.Helper()
	start := time.Now()
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	raw, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	took := time.Since(start)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("status %d: %v %s", resp.StatusCode, err, raw)
	}
	if !decode {
		return nil, took
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		b.Fatal(err)
	}
	return out, took
}

// conversation is a chat request body grown one message at a time: each
// message is encoded once, as the agent's client appends to its history,
// instead of the whole history every call.
type conversation struct {
	messages []byte // the encoded messages, comma-separated
}

func (c *conversation) add(b *testing.B, msg map[string]any) {
	b.Helper()
	enc, err := json.Marshal(msg)
	if err != nil {
		b.Fatal(err)
	}
	if len(c.messages) > 0 {
		c.messages = append(c.messages, ',')
	}
	c.messages = append(c.messages, enc...)
}

// body is the request with prefix's fields before messages and suffix's
// after them, keys in encoding/json's order.
func (c *conversation) body(prefix, suffix string) []byte { return c.bodyFrom(0, prefix, suffix) }

// bodyFrom is body with the messages from byte from of the encoded ones on
// (past a leading system message that another field carries instead).
func (c *conversation) bodyFrom(from int, prefix, suffix string) []byte {
	out := make([]byte, 0, len(prefix)+len(c.messages)+len(suffix)+16)
	out = append(out, prefix...)
	out = append(out, `"messages":[`...)
	out = append(out, c.messages[from:]...)
	out = append(out, ']')
	return append(out, suffix...)
}

// longRolloutSystem is the rollout's system prompt; the Messages leg sends
// it as the top-level system field.
const longRolloutSystem = "You are a coding agent."

// rolloutClient is how one leg's client speaks to the proxy: its route,
// its request for the conversation so far, and a reply's assistant text
// and prompt tokens.
type rolloutClient struct {
	route  string
	body   func(c *conversation) []byte
	answer func(reply map[string]any) (text any, promptTokens float64)
}

var (
	chatClient = rolloutClient{
		route: "/v1/chat/completions",
		body:  func(c *conversation) []byte { return c.body(`{"max_tokens":8,`, `,"model":"policy"}`) },
		answer: func(reply map[string]any) (any, float64) {
			msg := reply["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
			u, _ := reply["usage"].(map[string]any)
			n, _ := u["prompt_tokens"].(float64)
			return msg["content"], n
		},
	}
	// messagesClient speaks Anthropic Messages, as Claude Code does; the
	// proxy translates it to the same chat request the direct call sends.
	messagesClient = rolloutClient{
		route: "/v1/messages",
		body: func(c *conversation) []byte {
			skip := len(`{"content":"`+longRolloutSystem+`","role":"system"}`) + 1
			return c.bodyFrom(skip, `{"max_tokens":8,`, `,"model":"policy","system":"`+longRolloutSystem+`"}`)
		},
		answer: func(reply map[string]any) (any, float64) {
			block := reply["content"].([]any)[0].(map[string]any)
			u, _ := reply["usage"].(map[string]any)
			n, _ := u["input_tokens"].(float64)
			return block["text"], n
		},
	}
)

// BenchmarkLongRollout runs one rollout of 200 chat calls whose prompts
// grow to about 32k tokens, each call sent both through the proxy (capture
// path, the client's conversation) and directly to the same fake with the
// token fields the proxy adds, alternately, in the same run. It reports the
// proxy's added time per call over the last ten calls as a ratio to the
// direct call (added/direct), and the same ratio over calls 11-20, so that
// a per-call cost that grows with the number of earlier calls shows as a
// rising ratio. With the file store it also reports the disk's own time for
// the last call's durable append, as a ratio to the direct call: measured
// back to back once the rollout is done (fsync-floor), and between the last
// ten calls, a line of each call's record's length appended to a file of
// its own and synced (fsync-inline), which is the state of the machine the
// proxy's own sync meets. The
// messages leg sends the same conversation in the Anthropic Messages
// dialect (memory store), and the file-delta leg stores delta records
// (DeltaRecords, --delta-records).
func BenchmarkLongRollout(b *testing.B) {
	for _, kind := range []string{"memory", "messages", "file", "file-delta"} {
		b.Run(kind, func(b *testing.B) { benchLongRollout(b, kind) })
	}
}

func benchLongRollout(b *testing.B, kind string) {
	fake := benchFake(b, vllm.Options{MaxModelLen: 65536, Lengths: vllm.Lengths{Mean: 8, StdDev: 0.01, Min: 8}})
	ctx := context.Background()
	client := benchClient()
	turn := strings.TrimSpace(strings.Repeat("check the build log and report what failed there ", 15)) // ~160 tokens
	const calls = 200
	var lateRatio, earlyRatio, lateDirect, lastPrompt, floorRatio, inlineRatio []float64
	for it := 0; it < b.N; it++ {
		var st proxy.Store = store.NewMemoryStore()
		dir := b.TempDir()
		if strings.HasPrefix(kind, "file") {
			fs, err := store.NewFileStore(dir)
			if err != nil {
				b.Fatal(err)
			}
			st = fs
		}
		p, err := proxy.New(proxy.Options{Upstream: fake.URL(), Store: st, RequestTokenIDs: true, MaxBodyBytes: 64 << 20, DeltaRecords: kind == "file-delta"})
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			b.Fatal(err)
		}
		cl := chatClient
		if kind == "messages" {
			cl = messagesClient
		}
		url := fmt.Sprintf("%s/ng-rollout/long-%d/training-token-capture%s", p.URL(), it, cl.route)
		var conv conversation
		conv.add(b, map[string]any{"role": "system", "content": longRolloutSystem})
		added := make([]float64, calls)
		direct := make([]float64, calls)
		var inline []float64
		records := filepath.Join(dir, fmt.Sprintf("long-%d.tokens.jsonl", it))
		var promptTokens float64
		for i := range calls {
			conv.add(b, map[string]any{"role": "user", "content": fmt.Sprintf("step %d: %s", i, turn)})
			body := cl.body(&conv)
			directBody := conv.body(`{"logprobs":true,"max_tokens":8,`, `,"model":"policy","return_token_ids":true,"return_tokens_as_token_ids":true,"top_logprobs":0}`)
			var viaProxy, viaDirect time.Duration
			var reply map[string]any
			inlineAt := int64(-1) // the records file's size before the pair, for the last ten calls on the file store
			if strings.HasPrefix(kind, "file") && i >= calls-10 {
				inlineAt = fileSize(b, records)
			}
			if i%2 == 0 { // alternate the order: neither side always runs on a warmer machine
				_, viaDirect = postTimed(b, client, fake.URL()+"/v1/chat/completions", directBody, false)
				reply, viaProxy = postTimed(b, client, url, body, true)
			} else {
				reply, viaProxy = postTimed(b, client, url, body, true)
				_, viaDirect = postTimed(b, client, fake.URL()+"/v1/chat/completions", directBody, false)
			}
			added[i] = float64(viaProxy-viaDirect) / 1e3
			direct[i] = float64(viaDirect) / 1e3
			if inlineAt >= 0 {
				// The pair appended this call's record line and its newline.
				inline = append(inline, syncFloor(b, dir, "inline", int(fileSize(b, records)-inlineAt)-1, 1))
			}
			var text any
			text, promptTokens = cl.answer(reply)
			conv.add(b, map[string]any{"role": "assistant", "content": text})
		}
		_ = p.Close()
		_ = st.Close()
		lateRatio = append(lateRatio, stats.Median(added[calls-10:])/stats.Median(direct[calls-10:]))
		earlyRatio = append(earlyRatio, stats.Median(added[10:20])/stats.Median(direct[10:20]))
		lateDirect = append(lateDirect, stats.Median(direct[calls-10:]))
		lastPrompt = append(lastPrompt, promptTokens)
		if strings.HasPrefix(kind, "file") {
			floorRatio = append(floorRatio, durableFloor(b, dir, fmt.Sprintf("long-%d", it))/stats.Median(direct[calls-10:]))
			inlineRatio = append(inlineRatio, stats.Median(inline)/stats.Median(direct[calls-10:]))
		}
	}
	if strings.HasPrefix(kind, "file") {
		// What the disk alone takes for the durable append of the last
		// call's record line (its intent, written ahead, is synced only for
		// a call without a record), as a ratio to the direct call: the part
		// of added/direct no store can avoid here.
		b.ReportMetric(stats.Median(floorRatio), "fsync-floor/direct@200")
		// The same append made between calls, in the state the calls
		// leave the machine in, rather than back to back once they are
		// done.
		b.ReportMetric(stats.Median(inlineRatio), "fsync-inline/direct@200")
	}
	b.ReportMetric(stats.Median(lateRatio), "added/direct@200")
	b.ReportMetric(stats.Median(earlyRatio), "added/direct@20")
	b.ReportMetric(stats.Median(lateDirect), "direct-µs@200")
	b.ReportMetric(stats.Median(lastPrompt), "prompt-tokens@200")
}

// fileSize is the size of the file at path.
func fileSize(b *testing.B, path string) int64 {
	b.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return fi.Size()
}

// lastLineBytes is the length of the rollout's last record line.
func lastLineBytes(b *testing.B, dir, rollout string) int {
	b.Helper()
	data, err := os.ReadFile(filepath.Join(dir, rollout+".tokens.jsonl"))
	if err != nil {
		b.Fatal(err)
	}
	data = bytes.TrimSuffix(data, []byte("\n"))
	return len(data) - bytes.LastIndexByte(data, '\n')
}

// durableFloor is the median µs, on the disk under dir, of appending and
// fdatasyncing a line as long as the rollout's last record line.
func durableFloor(b *testing.B, dir, rollout string) float64 {
	b.Helper()
	return syncFloor(b, dir, "floor", lastLineBytes(b, dir, rollout), 21)
}

// syncFloor is the median µs over rounds, on the disk under dir, of
// appending and fdatasyncing one line of lineBytes to a file of its own in
// dir's folder sub (made if missing; a later call appends to the same file).
func syncFloor(b *testing.B, dir, sub string, lineBytes, rounds int) float64 {
	b.Helper()
	floorDir := filepath.Join(dir, sub)
	if err := os.MkdirAll(floorDir, 0o700); err != nil {
		b.Fatal(err)
	}
	took, err := syncfloor.Latency(floorDir, []int{lineBytes}, rounds)
	if err != nil {
		b.Fatal(err)
	}
	return float64(took) / 1e3
}
