package doctor

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ServerOptions say what to probe.
type ServerOptions struct {
	// URL is the model server (vLLM); ProxyURL the capture proxy (or Gym's
	// model server) in front of it, optional.
	URL, ProxyURL string
	// CaptureDir is where ProxyURL writes records; with it, the capture
	// call's record is looked for on disk.
	CaptureDir string
	// Model to call; empty takes the first served model.
	Model string
	// Client is the HTTP client; nil uses one with a 60 s timeout.
	Client *http.Client
}

// CheckServer probes a running stack: the model is served, an auto
// tool-choice call is accepted, token ids and log-probs come back, the
// context takes a 32,000-token request, and a call under the capture prefix
// lands in the capture directory. It sends small real requests (and one
// capture call under a fresh capbench-doctor-* rollout id).
func CheckServer(ctx context.Context, o ServerOptions) *Report {
	rep := NewReport("server", o.URL)
	p := &prober{o: o, rep: rep, c: o.Client}
	if p.c == nil {
		p.c = &http.Client{Timeout: 60 * time.Second}
	}
	base := strings.TrimSuffix(strings.TrimSuffix(o.URL, "/"), "/v1")
	if !p.models(ctx, base) {
		return rep
	}
	p.toolChoice(ctx, base)
	p.tokens(ctx, base)
	p.context32k(ctx, base)
	if o.ProxyURL != "" {
		p.capture(ctx, strings.TrimSuffix(strings.TrimSuffix(o.ProxyURL, "/"), "/v1"))
	}
	return rep
}

type prober struct {
	o           ServerOptions
	rep         *Report
	c           *http.Client
	model       string
	maxModelLen int
}

func (p *prober) result(name string, ok bool, detail string, f *Finding) {
	p.rep.Checks = append(p.rep.Checks, Check{Name: name, OK: ok, Detail: detail})
	if !ok && f != nil {
		f.Subject, f.Severity = name, Error
		if f.Message == "" {
			f.Message = detail
		}
		p.rep.Add(*f)
	}
}

func (p *prober) post(ctx context.Context, url string, body any) (int, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, out, err
}

func (p *prober) models(ctx context.Context, base string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/models", nil)
	if err != nil {
		p.result("model served", false, err.Error(), &Finding{Rule: "server/unreachable", Fix: "check the URL (scheme, host, port)"})
		return false
	}
	resp, err := p.c.Do(req)
	if err != nil {
		p.result("model served", false, "GET /v1/models: "+err.Error(), &Finding{Rule: "server/unreachable", Fix: "start vLLM, or check the URL and port"})
		return false
	}
	defer resp.Body.Close()
	var list struct {
		Data []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK || len(list.Data) == 0 {
		p.result("model served", false, fmt.Sprintf("GET /v1/models: status %d, no model listed", resp.StatusCode), &Finding{Rule: "server/no-model", Fix: "point at vLLM's OpenAI-compatible server"})
		return false
	}
	var ids []string
	for _, m := range list.Data {
		ids = append(ids, m.ID)
		if p.o.Model == "" || m.ID == p.o.Model {
			p.model, p.maxModelLen = m.ID, m.MaxModelLen
			break
		}
	}
	if p.model == "" {
		p.result("model served", false, fmt.Sprintf("%q is not served (served: %s)", p.o.Model, strings.Join(ids, ", ")), &Finding{Rule: "server/model-not-served", Fix: "use the --served-model-name vLLM was started with"})
		return false
	}
	p.result("model served", true, fmt.Sprintf("%s (max_model_len %d)", p.model, p.maxModelLen), nil)
	return true
}

var probeTool = []any{map[string]any{"type": "function", "function": map[string]any{
	"name": "Bash", "description": "Run a shell command",
	"parameters": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}, "required": []any{"command"}},
}}}

func (p *prober) toolChoice(ctx context.Context, base string) {
	code, body, err := p.post(ctx, base+"/v1/chat/completions", map[string]any{
		"model": p.model, "max_tokens": 16, "tools": probeTool, "tool_choice": "auto",
		"messages": []any{map[string]any{"role": "user", "content": "run echo hi"}},
	})
	switch {
	case err != nil:
		p.result("auto tool choice accepted", false, err.Error(), &Finding{Rule: "server/request-failed"})
	case code != http.StatusOK:
		p.result("auto tool choice accepted", false, fmt.Sprintf("status %d: %s", code, errText(body)), &Finding{Rule: "server/tool-choice-refused",
			Cause: "vLLM runs without --enable-auto-tool-choice and/or --tool-call-parser, so Claude Code's tool calls fail or stay text (one call per rollout)",
			Fix:   "restart vLLM with --enable-auto-tool-choice --tool-call-parser hermes"})
	default:
		p.result("auto tool choice accepted", true, "tool_choice \"auto\" with a tool: 200", nil)
	}
}

func (p *prober) tokens(ctx context.Context, base string) {
	code, body, err := p.post(ctx, base+"/v1/chat/completions", map[string]any{
		"model": p.model, "max_tokens": 8, "logprobs": true, "return_token_ids": true,
		"messages": []any{map[string]any{"role": "user", "content": "say hi"}},
	})
	if err != nil || code != http.StatusOK {
		p.result("token ids and log-probs returned", false, fmt.Sprintf("status %d: %v %s", code, err, errText(body)), &Finding{Rule: "server/request-failed"})
		return
	}
	var r struct {
		PromptTokenIDs []int `json:"prompt_token_ids"`
		Choices        []struct {
			TokenIDs []int `json:"token_ids"`
			Logprobs *struct {
				Content []any `json:"content"`
			} `json:"logprobs"`
		} `json:"choices"`
	}
	_ = json.Unmarshal(body, &r)
	ok := len(r.Choices) > 0 && len(r.PromptTokenIDs) > 0 && len(r.Choices[0].TokenIDs) > 0 && r.Choices[0].Logprobs != nil && len(r.Choices[0].Logprobs.Content) == len(r.Choices[0].TokenIDs)
	if !ok {
		p.result("token ids and log-probs returned", false, "the reply lacks prompt_token_ids, choices[0].token_ids or matching logprobs", &Finding{Rule: "server/no-token-ids",
			Cause: "the tokenizer is off (--skip-tokenizer-init / skip_tokenizer_init: true) or vLLM is too old for return_token_ids",
			Fix:   "keep the tokenizer on; use vLLM 0.10 or newer"})
		return
	}
	p.result("token ids and log-probs returned", true, fmt.Sprintf("%d prompt ids, %d generated ids with log-probs", len(r.PromptTokenIDs), len(r.Choices[0].TokenIDs)), nil)
}

// context32k sends a 32,000-token streaming request and leaves after the
// first event: vLLM validates the length before it streams.
func (p *prober) context32k(ctx context.Context, base string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	b, _ := json.Marshal(map[string]any{
		"model": p.model, "max_tokens": ClaudeCodeMaxTokens, "stream": true,
		"messages": []any{map[string]any{"role": "user", "content": strings.Repeat("hello ", 2000)}},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", bytes.NewReader(b))
	if err != nil {
		p.result("context holds a 32,000-token request", false, err.Error(), &Finding{Rule: "server/request-failed"})
		return
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.c.Do(req)
	if err != nil {
		p.result("context holds a 32,000-token request", false, err.Error(), &Finding{Rule: "server/request-failed"})
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		p.result("context holds a 32,000-token request", false, fmt.Sprintf("status %d: %s", resp.StatusCode, errText(body)), &Finding{Rule: "server/context-too-small",
			Cause: fmt.Sprintf("max_model_len %d is smaller than a prompt plus Claude Code's 32,000 output tokens", p.maxModelLen),
			Fix:   "restart vLLM with --max-model-len 65536"})
		return
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n')
	p.result("context holds a 32,000-token request", true, fmt.Sprintf("max_tokens 32000 with a ~2,000-token prompt accepted (first event %q)", truncate(strings.TrimSpace(line), 40)), nil)
}

func (p *prober) capture(ctx context.Context, proxy string) {
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	id := "capbench-doctor-" + hex.EncodeToString(rnd[:])
	url := proxy + "/ng-rollout/" + id + "/training-token-capture/v1/chat/completions"
	code, body, err := p.post(ctx, url, map[string]any{
		"model": p.model, "max_tokens": 8,
		"messages": []any{map[string]any{"role": "user", "content": "say hi"}},
	})
	if err != nil || code != http.StatusOK {
		p.result("capture call lands in the capture directory", false, fmt.Sprintf("POST %s: status %d %v %s", url, code, err, errText(body)),
			&Finding{Rule: "server/capture-call-failed", Fix: "check --proxy-url: the harness's base URL is PROXY/ng-rollout/<id>/training-token-capture"})
		return
	}
	if p.o.CaptureDir == "" {
		p.result("capture call lands in the capture directory", true, "the call through the capture prefix was served (give --capture-dir to check the record on disk)", nil)
		return
	}
	path := filepath.Join(p.o.CaptureDir, id+".tokens.jsonl")
	deadline := time.Now().Add(5 * time.Second)
	for {
		if n := countRecords(p.o.CaptureDir, id); n > 0 {
			p.result("capture call lands in the capture directory", true, fmt.Sprintf("%s holds %d record(s) for rollout %s", path, n, id), nil)
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	_, statErr := os.Stat(p.o.CaptureDir)
	p.result("capture call lands in the capture directory", false, fmt.Sprintf("no record for rollout %s in %s (%v)", id, p.o.CaptureDir, statErr), &Finding{Rule: "server/not-captured",
		Cause: "the proxy is not capturing (capture disabled, or --proxy-url is vLLM itself), or it writes to another directory",
		Fix:   "enable token_id_capture on the model server and give --capture-dir the directory it writes"})
}

func errText(body []byte) string {
	var e struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
		Message string `json:"message"`
	}
	if json.Unmarshal(body, &e) == nil {
		if e.Error.Message != "" {
			return e.Error.Message
		}
		if e.Message != "" {
			return e.Message
		}
	}
	return truncate(string(body), 200)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
