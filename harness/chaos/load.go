package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/capbench/capbench/scenarios"
)

// callsPerRollout is the length of each rollout's chain of calls.
const callsPerRollout = 4

// load is a set of agents: each runs rollouts of chained chat calls (every
// third one streamed) against the proxies in turn, retrying a failed call
// with the identical body, as harnesses do.
type load struct {
	tag     string
	proxies []string
	workers int
	// maxCalls stops the load after this many calls in all (0: until ctx).
	maxCalls int64
	client   *http.Client
	header   http.Header
	// padding, when > 0, pads every request body to about this many bytes
	// with a field the engine ignores (a big request, not a long prompt).
	padding int

	tried atomic.Int64
	acked atomic.Int64

	mu     sync.Mutex
	acks   map[string][]string // rollout id → acknowledged response ids
	status map[int]int         // non-200 statuses seen
	errs   int                 // transport errors
}

func newLoad(tag string, workers int, proxies ...string) *load {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = workers * 2
	return &load{tag: tag, proxies: proxies, workers: workers,
		client: &http.Client{Transport: t, Timeout: 30 * time.Second},
		acks:   map[string][]string{}, status: map[int]int{}}
}

// run drives the load until stop ends or maxCalls calls were sent. Calls in
// flight when stop ends are finished, not cancelled: a cancelled call would
// mask its rollout and blur the counts.
func (l *load) run(stop context.Context) {
	ctx := context.WithoutCancel(stop)
	var wg sync.WaitGroup
	for w := range l.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; stop.Err() == nil && !l.done(); r++ {
				l.rollout(stop, ctx, fmt.Sprintf("%s-w%d-r%d", l.tag, w, r))
			}
		}()
	}
	wg.Wait()
	l.client.CloseIdleConnections()
}

func (l *load) done() bool { return l.maxCalls > 0 && l.tried.Load() >= l.maxCalls }

// rollout runs one chain of calls; a failed call is retried (same body) up
// to three times before the rollout is abandoned.
func (l *load) rollout(stop, ctx context.Context, id string) {
	msgs := []any{map[string]any{"role": "user", "content": "chaos task " + id}}
	for call := 0; call < callsPerRollout; {
		var reply string
		var ok bool
		for try := 0; try < 3 && stop.Err() == nil && !l.done(); try++ {
			if reply, ok = l.call(ctx, id, msgs, call%3 == 2); ok {
				break
			}
			time.Sleep(time.Duration(try+1) * 20 * time.Millisecond) // back off like a client
		}
		if !ok {
			return
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": reply},
			map[string]any{"role": "user", "content": fmt.Sprintf("next step %d of %s", call+1, id)})
		call++
	}
}

// call sends one chat call and reports whether the client accepts it: a 200
// with a complete reply (for a stream, a finish_reason and [DONE]).
func (l *load) call(ctx context.Context, rollout string, msgs []any, stream bool) (string, bool) {
	n := l.tried.Add(1)
	base := l.proxies[int(n)%len(l.proxies)]
	req := map[string]any{"model": scenarios.DefaultModel, "messages": msgs, "max_tokens": 12, "stream": stream}
	if l.padding > 0 {
		req["metadata"] = padding(l.padding)
	}
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost,
		base+"/ng-rollout/"+rollout+"/training-token-capture/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", false
	}
	hreq.Header.Set("Content-Type", "application/json")
	for k, v := range l.header {
		hreq.Header[k] = v
	}
	resp, err := l.client.Do(hreq)
	if err != nil {
		l.note(0)
		return "", false
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		l.note(resp.StatusCode)
		return "", false
	}
	var id, text string
	var ok bool
	if stream {
		id, text, ok = readStream(resp.Body)
	} else {
		id, text, ok = readReply(resp.Body)
	}
	if !ok {
		l.note(-1)
		return "", false
	}
	l.acked.Add(1)
	l.mu.Lock()
	l.acks[rollout] = append(l.acks[rollout], id)
	l.mu.Unlock()
	return text, true
}

// note counts a failure: a status, 0 for a transport error, -1 for a reply
// the client rejected (cut short or malformed).
func (l *load) note(status int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if status == 0 {
		l.errs++
		return
	}
	l.status[status]++
}

// failures renders what went wrong, for a row's notes.
func (l *load) failures() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	if l.errs > 0 {
		parts = append(parts, fmt.Sprintf("%d conn errors", l.errs))
	}
	for _, s := range sortedKeys(l.status) {
		name := fmt.Sprint(s)
		if s == -1 {
			name = "cut"
		}
		parts = append(parts, fmt.Sprintf("%d×%s", l.status[s], name))
	}
	return strings.Join(parts, " ")
}

// padding is about n bytes of small JSON objects: decoding them costs what
// a long agent transcript costs.
func padding(n int) []any {
	const each = 64
	out := make([]any, 0, n/each)
	for i := 0; i < n/each; i++ {
		out = append(out, map[string]any{"k": i, "v": "padding-padding-padding-padding"})
	}
	return out
}

func readReply(r io.Reader) (id, text string, ok bool) {
	var out struct {
		ID      string `json:"id"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.NewDecoder(r).Decode(&out) != nil || out.ID == "" || len(out.Choices) == 0 || out.Choices[0].FinishReason == "" {
		return "", "", false
	}
	return out.ID, out.Choices[0].Message.Content, true
}

func readStream(r io.Reader) (id, text string, ok bool) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var b strings.Builder
	finished, done := false, false
	for sc.Scan() {
		data, found := strings.CutPrefix(sc.Text(), "data: ")
		if !found {
			continue
		}
		if data == "[DONE]" {
			done = true
			break
		}
		var ch struct {
			ID      string `json:"id"`
			Error   any    `json:"error"`
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(data), &ch) != nil || ch.Error != nil {
			return "", "", false
		}
		if ch.ID != "" {
			id = ch.ID
		}
		for _, c := range ch.Choices {
			b.WriteString(c.Delta.Content)
			if c.FinishReason != nil && *c.FinishReason != "" {
				finished = true
			}
		}
	}
	return id, b.String(), done && finished && id != "" && sc.Err() == nil
}
