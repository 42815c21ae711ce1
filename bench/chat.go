package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// ChatTarget describes the Chat Completions endpoint a load run drives.
type ChatTarget struct {
	// BaseURL is the server root, e.g. http://127.0.0.1:8000 or a proxy URL
	// ending in /ng-rollout/<id>/training-token-capture.
	BaseURL   string
	Model     string
	Prompt    string
	MaxTokens int
	Stream    bool
	APIKey    string
	// Header is added to every request (e.g. X-Fake-Script).
	Header http.Header
	// BaseURLFor, when set, gives the base URL of each request (for example a
	// fresh rollout id per request); BaseURL is then only checked for presence.
	// Every worker goroutine calls it, so it must be safe for concurrent use.
	BaseURLFor func() string
}

// NewHTTPClient returns a client sized for conc concurrent connections to one
// host, without transparent gzip (it would hide the wire timing).
func NewHTTPClient(conc int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        conc * 2,
		MaxIdleConnsPerHost: conc * 2,
		MaxConnsPerHost:     0,
		DisableCompression:  true,
		IdleConnTimeout:     90 * time.Second,
	}}
}

type chatUsage struct {
	CompletionTokens int `json:"completion_tokens"`
}

// ChatRequest returns a Do that sends one chat completion per call. Streaming
// requests ask for the usage chunk so the token count is the server's, and
// record the time to the first content-bearing chunk.
func ChatRequest(client *http.Client, t ChatTarget) (Do, error) {
	if t.BaseURL == "" {
		return nil, errors.New("bench: chat target needs a base URL")
	}
	if t.MaxTokens <= 0 {
		return nil, fmt.Errorf("bench: MaxTokens must be positive, got %d", t.MaxTokens)
	}
	body := map[string]any{
		"model":      t.Model,
		"messages":   []map[string]string{{"role": "user", "content": t.Prompt}},
		"max_tokens": t.MaxTokens,
		"stream":     t.Stream,
	}
	if t.Stream {
		body["stream_options"] = map[string]any{"include_usage": true}
	}
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("bench: encode request: %w", err)
	}
	const path = "/v1/chat/completions"
	fixed := strings.TrimRight(t.BaseURL, "/") + path
	return func(ctx context.Context) (Sample, error) {
		url := fixed
		if t.BaseURLFor != nil {
			url = strings.TrimRight(t.BaseURLFor(), "/") + path
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(payload))
		if err != nil {
			return Sample{}, err
		}
		req.Header.Set("Content-Type", "application/json")
		for k, vs := range t.Header {
			for _, v := range vs {
				req.Header.Add(k, v)
			}
		}
		if t.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+t.APIKey)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return Sample{}, err
		}
		defer closeBody(resp.Body)
		if resp.StatusCode != http.StatusOK {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			return Sample{}, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		}
		if !t.Stream {
			var out struct {
				Usage chatUsage `json:"usage"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
				return Sample{}, fmt.Errorf("decode reply: %w", err)
			}
			return Sample{Tokens: out.Usage.CompletionTokens}, nil
		}
		return readChatStream(resp.Body, start)
	}, nil
}

func readChatStream(r io.Reader, start time.Time) (Sample, error) {
	sc := bufio.NewScanner(r)
	// Default 64 KiB lines are too small for chunks carrying long content.
	sc.Buffer(make([]byte, 64*1024), 8*1024*1024)
	var (
		s      Sample
		chunks int
		done   bool
	)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		data := bytes.TrimSpace(line[5:])
		if bytes.Equal(data, []byte("[DONE]")) {
			done = true
			break
		}
		var ev struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					Reasoning *string `json:"reasoning"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *chatUsage `json:"usage"`
			Error *struct {
				Message string `json:"message"`
			} `json:"error"`
		}
		if err := json.Unmarshal(data, &ev); err != nil {
			return s, fmt.Errorf("bad stream event: %w", err)
		}
		if ev.Error != nil {
			return s, fmt.Errorf("stream error: %s", ev.Error.Message)
		}
		for _, c := range ev.Choices {
			if (c.Delta.Content != nil && *c.Delta.Content != "") || (c.Delta.Reasoning != nil && *c.Delta.Reasoning != "") {
				if s.TTFT == 0 {
					s.TTFT = time.Since(start)
				}
				chunks++
			}
		}
		if ev.Usage != nil {
			s.Tokens = ev.Usage.CompletionTokens
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("read stream: %w", err)
	}
	if !done {
		return s, errors.New("stream ended without [DONE]")
	}
	if s.Tokens == 0 {
		s.Tokens = chunks
	}
	return s, nil
}

// maxDrain bounds what closeBody reads past the reply; a longer tail costs a
// new connection instead of unbounded reading.
const maxDrain = 64 << 10

// closeBody reads the rest of a reply before closing it. The transport only
// reuses a connection whose body reached EOF, and a reader that stops at the
// JSON value's end or at [DONE] usually has not seen the chunked terminator
// yet; without the drain every request would pay for a new connection and
// the benchmark would measure connection setup.
func closeBody(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, maxDrain))
	_ = body.Close()
}
