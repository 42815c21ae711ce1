package vllm_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/capbench/capbench/fakes/vllm"
)

// FuzzChatRequest feeds arbitrary bodies to the chat and completion routes:
// every answer must be a client error or a success, never a panic or a 5xx
// other than 501, the fake's documented refusal of n>1 and of several prompts.
func FuzzChatRequest(f *testing.F) {
	for _, seed := range []string{
		`{"messages":[{"role":"user","content":"hi"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"stream":true,"logprobs":true,"top_logprobs":5,"return_token_ids":true}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{}}}]}`,
		`{"messages":[{"role":"assistant","content":null,"tool_calls":[{"type":"function","function":{"name":"f","arguments":"{"}}]}]}`,
		`{"prompt":[1,2,3],"max_tokens":3,"logprobs":2,"echo":true}`,
		`{"messages":[],"max_tokens":-5,"stop":["a",""],"n":3}`,
		`{"messages":[{"role":"user","content":"x"}],"stop":" ","stop_token_ids":[151645]}`,
		`{"messages":[{"role":"user","content":"hi"}],"n":2}`,
		`{"prompt":["a","b"]}`,
		`{`, `[]`, `null`, ``,
	} {
		f.Add([]byte(seed))
	}
	s, err := vllm.New(vllm.Options{MaxModelLen: 512, EnableAutoToolChoice: true, ToolCallParser: "hermes", ReasoningParser: "qwen3"})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/tokenize"} {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			if w.Code >= 500 && w.Code != http.StatusNotImplemented {
				t.Fatalf("%s answered %d to %q: %s", path, w.Code, body, w.Body.String())
			}
		}
	})
}
