package proxy_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

// FuzzRequestBody drives every dialect route with arbitrary bodies: the proxy
// must answer (never panic), and a 4xx must leave the store untouched.
func FuzzRequestBody(f *testing.F) {
	routes := []string{"/v1/chat/completions", "/v1/messages", "/v1/responses", "/v1/completions"}
	up := newStubVLLM()
	defer up.Close()
	for _, seed := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","max_tokens":5,"system":[{"type":"text","text":"s"}],"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[1,2]}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"r"}]}]}]}`,
		`{"input":[{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":{"x":1}}]}`,
		`{"prompt":"once","n":1}`,
		`{"messages":[null,1,"x",{}],"n":"2"}`,
		`[]`, `null`, `{"messages":{"role":"user"}}`,
	} {
		for route := range routes {
			f.Add(uint8(route), []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := routes[int(route)%len(routes)]
		st := store.NewMemoryStore()
		p, err := proxy.New(proxy.Options{Upstream: up.URL(), Store: st, MaxBodyBytes: 1 << 16})
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "/ng-rollout/fz/training-token-capture"+path, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		p.Handler().ServeHTTP(rec, req)
		if rec.Code >= 400 && rec.Code < 500 {
			if es, err := st.ReadEntries(t.Context(), "fz"); err != nil || len(es) != 0 {
				t.Fatalf("status %d but entries %d (err %v)", rec.Code, len(es), err)
			}
		}
	})
}
