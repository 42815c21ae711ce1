package proxy_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

// FuzzRawRequest feeds whole HTTP/1.1 requests (request line, headers,
// body) to the proxy's handler, guard included: it must never panic, and
// every reply must be well-formed: a status code, JSON where it says JSON,
// SSE frames where it says event-stream, an error envelope on errors, and
// never the upstream's address.
func FuzzRawRequest(f *testing.F) {
	up := newStubVLLM()
	defer up.Close()
	upHost := strings.TrimPrefix(up.URL(), "http://")
	tok := proxy.RolloutToken("s", "r1")
	for _, seed := range []string{
		"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 45\r\n\r\n" + hiBody,
		"POST /ng-rollout/r1/training-token-capture/v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Rollout-Token: " + tok +
			"\r\nContent-Type: application/json\r\nContent-Length: 63\r\n\r\n" + `{"messages":[{"role":"user","content":"hi"}],"stream":true}`,
		"POST /ng-rollout/r1/training-token-capture/v1/messages HTTP/1.1\r\nHost: x\r\nAuthorization: bearer " + tok +
			"\r\nContent-Length: 70\r\n\r\n" + `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"q"}]}`,
		"POST /v1/chat/completions%3Fx=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}",
		"GET /fake/ledger HTTP/1.1\r\nHost: x\r\n\r\n",
		"PUT /fake/scripts HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n[]",
		"POST /tokenize HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"HEAD /ng-rollout/r1/training-token-capture HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /v1/responses/resp_1/cancel HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n{",
		"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // the server answers 400 itself; the handler never sees it
		}
		req.RequestURI, req.RemoteAddr = "", "127.0.0.1:1"
		st := store.NewMemoryStore()
		p, err := proxy.New(proxy.Options{Upstream: up.URL(), Store: st, MaxBodyBytes: 1 << 16, RolloutSecret: "s"})
		if err != nil {
			t.Fatal(err)
		}
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, req)
		checkReply(t, req, rec, upHost)
	})
}

func checkReply(t *testing.T, req *http.Request, rec *httptest.ResponseRecorder, upHost string) {
	t.Helper()
	body := rec.Body.Bytes()
	if rec.Code < 100 || rec.Code > 599 {
		t.Fatalf("status %d", rec.Code)
	}
	if bytes.Contains(body, []byte(upHost)) {
		t.Fatalf("reply shows the upstream address: %s", body)
	}
	ct := rec.Header().Get("Content-Type")
	switch {
	case req.Method == http.MethodHead:
	case strings.HasPrefix(ct, "text/event-stream"):
		for _, line := range strings.Split(string(body), "\n") {
			if line != "" && !strings.HasPrefix(line, "data: ") && !strings.HasPrefix(line, "event: ") {
				t.Fatalf("malformed SSE line %q", line)
			}
		}
	case strings.HasPrefix(ct, "application/json"):
		if !json.Valid(body) {
			t.Fatalf("status %d: invalid JSON reply %q", rec.Code, body)
		}
		if rec.Code >= 400 {
			var env struct {
				Error  json.RawMessage `json:"error"`
				Detail json.RawMessage `json:"detail"`
			}
			if json.Unmarshal(body, &env) != nil || (len(env.Error) == 0 && len(env.Detail) == 0) {
				t.Fatalf("status %d without an error envelope: %s", rec.Code, body)
			}
		}
	case rec.Code >= 400 && len(body) > 0:
		t.Fatalf("status %d with a %q body: %q", rec.Code, ct, body)
	}
}
