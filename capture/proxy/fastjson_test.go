package proxy

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/capbench/capbench/capture/record"
)

// FuzzDecodeChatReply checks the structural fast path against encoding/json:
// whatever the fast path accepts must decode to the same JSON with the slow
// path, and input encoding/json rejects must not come out as valid JSON.
func FuzzDecodeChatReply(f *testing.F) {
	for _, seed := range []string{
		`{"id":"chatcmpl-1","choices":[{"index":0,"message":{"role":"assistant","content":"hi \"x\""},"logprobs":{"content":[{"token":"token_id:5","logprob":-0.5,"bytes":[1,2],"top_logprobs":[]},{"token":"token_id:6","logprob":-1e-3}]},"token_ids":[5,6]}],"prompt_token_ids":[1,2,3],"usage":{"prompt_tokens":3}}`,
		`{"choices":[{"logprobs":null,"token_ids":null}],"prompt_token_ids":null}`,
		`{"choices":[{"logprobs":{"content":null}}]}`,
		`{"choices":[],"prompt_token_ids":[1,"2",3.5]}`,
		`{"a\u0041":{"nested":[{},[],""]}}`,
		`{"choices":[{"logprobs":{"content":[{"token":"token_id:\u0031","logprob":true}]}}]}`,
		` { "x" : 1 } `, `{}`, `[]`, `{"x":1}x`, `{"x":}`,
		`{"prompt_token_ids":[0,-0,7, 8 ,123456789012345678],"choices":[{"token_ids":[ ]}]}`,
		`{"prompt_token_ids":[01,2]}`, `{"prompt_token_ids":[1234567890123456789]}`, `{"prompt_token_ids":[1e3,2]}`,
		`{"prompt_token_ids":[1,2,]}`, `{"prompt_token_ids":[-]}`, `{"prompt_token_ids":[1 2]}`, `{"prompt_token_ids":[1,2] }`,
		`{"prompt_token_ids":[1.0]}`, `{"prompt_token_ids":[--1]}`, `{"prompt_token_ids":[1,2`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		var prompt promptIDs // the path the capture takes
		fast, ferr := decodeChatReplyFast(raw, &prompt)
		slow, serr := decodeChatReplySlow(raw)
		if ferr != nil {
			return // the caller falls back to the slow path
		}
		fb, merr := json.Marshal(fast)
		if serr != nil {
			if merr == nil && json.Valid(raw) {
				t.Fatalf("fast path accepted input the slow path rejects (%v): %q", serr, raw)
			}
			return
		}
		if merr != nil {
			t.Fatalf("fast result does not encode (%v) but the slow path accepted %q", merr, raw)
		}
		sb, err := json.Marshal(slow)
		if err != nil {
			t.Fatalf("slow result does not encode: %v", err)
		}
		if !bytes.Equal(fb, sb) {
			t.Fatalf("fast and slow differ for %q:\nfast %s\nslow %s", raw, fb, sb)
		}
	})
}

// smallChatReply is the fake's reply to a four-token chat call as the proxy
// asks for it (token ids, log-probs): the reply every small captured call
// decodes.
const smallChatReply = `{"id":"chatcmpl-8387d57d269ab200","object":"chat.completion","created":1796190779,"model":"policy","choices":[{"index":0,"message":{"role":"assistant","content":"would is a three","refusal":null,"annotations":null,"audio":null,"function_call":null,"reasoning":null},"logprobs":{"content":[{"token":"token_id:412","logprob":-1.316896,"bytes":[119,111,117,108,100],"top_logprobs":[]},{"token":"token_id:277","logprob":-0.117234,"bytes":[32,105,115],"top_logprobs":[]},{"token":"token_id:3804","logprob":-0.004614,"bytes":[32,97],"top_logprobs":[]},{"token":"token_id:785","logprob":-0.004067,"bytes":[32,116,104,114,101,101],"top_logprobs":[]}]},"finish_reason":"length","stop_reason":null,"token_ids":[412,277,3804,785],"routed_experts":null}],"service_tier":null,"system_fingerprint":"vllm-0.29.0-27e4de12","usage":{"prompt_tokens":10,"total_tokens":14,"completion_tokens":4,"prompt_tokens_details":null,"completion_tokens_details":null},"prompt_logprobs":null,"prompt_token_ids":[151644,1812,10,852,4585,151645,10,151644,1816,10],"prompt_text":null,"kv_transfer_params":null,"ec_transfer_params":null,"metrics":null}`

// BenchmarkDecodeSmallChatReply is the reply decode of one small captured
// call.
func BenchmarkDecodeSmallChatReply(b *testing.B) {
	benchDecode(b, []byte(smallChatReply))
}

// benchDecode times the capture's decode of the reply raw.
func benchDecode(b *testing.B, raw []byte) {
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		var prompt promptIDs
		if _, err := decodeChatReplyText(raw, &prompt); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPromptIDs32k reads a reply's 32k prompt token ids with the
// one-pass integer scan parseIntList tries first (and with the copy of the
// ids the capture keeps beside their text), and with the general element
// splitter it falls back to, side by side.
func BenchmarkPromptIDs32k(b *testing.B) {
	ids := []byte("[")
	for i := range 32000 {
		if i > 0 {
			ids = append(ids, ',')
		}
		ids = strconv.AppendInt(ids, int64(i*37%151000), 10)
	}
	ids = append(ids, ']')
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(ids)))
		for b.Loop() {
			if out, ok := record.ParseIntArray(ids); !ok || len(out) != 32000 {
				b.Fatal("the scan refused the ids")
			}
		}
	})
	b.Run("scan+text", func(b *testing.B) {
		b.SetBytes(int64(len(ids)))
		for b.Loop() {
			if out, _, ok := record.ParseTokenIDs(ids); !ok || len(out) != 32000 {
				b.Fatal("the scan refused the ids")
			}
		}
	})
	b.Run("split", func(b *testing.B) {
		b.SetBytes(int64(len(ids)))
		for b.Loop() {
			if out, ok := splitIntList(ids); !ok || len(out) != 32000 {
				b.Fatal("the splitter refused the ids")
			}
		}
	})
}

// FuzzValueEnd checks valueEnd's search for flat arrays against the
// byte-at-a-time container scan: the same end, or an error from both, for
// any input.
func FuzzValueEnd(f *testing.F) {
	for _, seed := range []string{
		`[1,2,3]`, `[]`, `[1,[2],3]`, `[[1],[2]]`, `[1,"]",2]`, `[1,}]`, `[1,{"a":]}]`, `[1,2`, `[1] x`,
		`{"a":[1]}`, `[1,2],[3]`, `["a"]`, `[ 1 , 2 ]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || (raw[0] != '[' && raw[0] != '{') {
			return
		}
		end, err := valueEnd(raw, 0)
		want, werr := containerEnd(raw, 0)
		if (err == nil) != (werr == nil) || end != want {
			t.Fatalf("valueEnd(%q) = %d, %v; the container scan says %d, %v", raw, end, err, want, werr)
		}
	})
}

// longChatReply is smallChatReply with the prompt ids of an n-token
// prompt, as a long rollout's last calls get it back.
func longChatReply(n int) []byte {
	ids := []byte("[")
	for i := range n {
		if i > 0 {
			ids = append(ids, ',')
		}
		ids = strconv.AppendInt(ids, int64(i*37%151000), 10)
	}
	ids = append(ids, ']')
	return bytes.Replace([]byte(smallChatReply), []byte(`[151644,1812,10,852,4585,151645,10,151644,1816,10]`), ids, 1)
}

// BenchmarkDecodeLongChatReply is the reply decode of a captured call at
// the end of a long rollout, mostly its prompt ids: read alone, and read
// after the previous call's prompt, 200 tokens shorter.
func BenchmarkDecodeLongChatReply(b *testing.B) {
	raw := longChatReply(31500)
	var prev promptIDs
	if _, err := decodeChatReplyText(longChatReply(31300), &prev); err != nil || prev.text.IsZero() {
		b.Fatalf("the previous reply gave no prompt text (%v)", err)
	}
	for _, c := range []struct {
		name string
		prev record.TokenText
	}{{"alone", record.TokenText{}}, {"after-previous", prev.text}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(raw)))
			b.ReportAllocs()
			for b.Loop() {
				prompt := promptIDs{prev: c.prev}
				if _, err := decodeChatReplyText(raw, &prompt); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzParseTokenIDBytes checks the copy-free token id read against
// parseTokenIDString: the same id, or an error from both with the same
// message.
func FuzzParseTokenIDBytes(f *testing.F) {
	for _, seed := range []string{
		"token_id:412", "token_id:0", "token_id:0412", "token_id:-3", "token_id:+5", "token_id:", "token_id",
		"token_id:12a", "token_id:123456789012345678", "token_id:1234567890123456789", "token_id:99999999999999999999",
		"tok:1", "", "token_id: 1",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gerr := parseTokenIDBytes(b)
		want, werr := parseTokenIDString(string(b))
		if got != want || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
			t.Fatalf("parseTokenIDBytes(%q) = %d, %v; parseTokenIDString says %d, %v", b, got, gerr, want, werr)
		}
	})
}

// generationReply is smallChatReply with n generated tokens, each with its
// log-prob entry, as a training-sized call's reply carries them.
func generationReply(n int) []byte {
	var lp, ids bytes.Buffer
	for i := range n {
		if i > 0 {
			lp.WriteByte(',')
			ids.WriteByte(',')
		}
		id := strconv.Itoa(i*7919%151000 + 1)
		lp.WriteString(`{"token":"token_id:` + id + `","logprob":-0.` + strconv.Itoa(i%997+1) + `,"bytes":[32,116],"top_logprobs":[]}`)
		ids.WriteString(id)
	}
	raw := []byte(smallChatReply)
	start := bytes.Index(raw, []byte(`"content":[{"token"`)) + len(`"content":`)
	end := bytes.Index(raw, []byte(`]},"finish_reason"`)) + 1
	raw = append(append(append([]byte{}, raw[:start]...), "["+lp.String()+"]"...), raw[end:]...)
	return bytes.Replace(raw, []byte(`"token_ids":[412,277,3804,785]`), []byte(`"token_ids":[`+ids.String()+`]`), 1)
}

// BenchmarkDecodeGenerationReply is the reply decode of a call that
// generated 1,000 tokens, with their log-probs.
func BenchmarkDecodeGenerationReply(b *testing.B) {
	raw := generationReply(1000)
	var check promptIDs
	out, err := decodeChatReplyText(raw, &check)
	if err != nil {
		b.Fatal(err)
	}
	if ids, _, err := logprobTokens(out["choices"].([]any)[0].(map[string]any)["logprobs"]); err != nil || len(ids) != 1000 {
		b.Fatalf("the reply's log-probs read as %d tokens (%v)", len(ids), err)
	}
	benchDecode(b, raw)
}
