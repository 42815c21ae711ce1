package vllm_test

import (
	"testing"

	"github.com/capbench/capbench/fakes/vllm"
)

// chatDecodeSeeds are bodies real clients send plus the edge cases the
// fast decoder must hand back to encoding/json (folded or repeated keys,
// escapes, fractions in integers, nulls, deep nesting).
var chatDecodeSeeds = []string{
	`{"model":"Qwen/Qwen3-4B-Thinking-2507","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}`,
	`{"messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\": 1}"}}]},{"role":"tool","tool_call_id":"c","content":"r","name":"f"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object","properties":{"b":{"type":"string"},"a":{"type":"integer"}}}}}],"tool_choice":"auto","stream":true,"stream_options":{"include_usage":true},"temperature":0.7,"top_p":1,"seed":-3,"logprobs":true,"top_logprobs":2,"return_token_ids":true,"chat_template_kwargs":{"enable_thinking":false},"stop":["x"],"stop_token_ids":[1,2]}`,
	`{"Model":"m","messages":[]}`,
	`{"model":"m\u00e9","messages":null}`,
	`{"messages":[null,{"ROLE":"user"}],"max_tokens":1.0}`,
	`{"messages":[{"role":"user","content":"a","content":"b"}],"model":"a","model":"b"}`,
	`{"max_tokens":1e2,"n":null,"temperature":-0,"stream":null,"tools":[null]}`,
	`{"max_tokens":99999999999999999999,"temperature":1e400}`,
	` {"messages":[{"role":"user","content":"\ud800"}]} `,
	`{"messages":[[[[[[]]]]]]}`, `{"a":{"b":[1,2,{"c":"\n"}]}}x`, `null`, `[]`, `{`, `{"a"}`, "{\"model\":\"\xff\"}",
	`{"messages":[{"role":"user","content":"x"}],"max_tokens":"16","stream":"true","top_k":-1,"min_p":0.5}`,
}

// FuzzChatDecode checks the fast chat decoder against encoding/json:
// whenever it accepts a body, encoding/json accepts it too and decodes the
// same request.
func FuzzChatDecode(f *testing.F) {
	for _, s := range chatDecodeSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fastOK, jsonOK, diff := vllm.DecodeChatBoth(body)
		if fastOK && !jsonOK {
			t.Fatalf("fast decoder accepted %q, encoding/json rejects it", body)
		}
		if diff != "" {
			t.Fatalf("decoders disagree on %q:\n%s", body, diff)
		}
	})
}
