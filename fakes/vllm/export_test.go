package vllm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// CheckFillerIDs draws unscripted filler for seeds seeds on a template
// variant and reports the first seed whose ids are not the tokenizer's
// encoding of its text, or whose text is not what the template renders.
func CheckFillerIDs(variant string, seeds int) error {
	tok, tmpl, err := newTextModel(variant)
	if err != nil {
		return err
	}
	e := newEngine(tok, tmpl, Lengths{Mean: 48, StdDev: 24, Min: 1})
	for i := range uint64(seeds) {
		seed, maxTokens := i*0x9e3779b97f4a7c15, 1+int(i%97)
		text, ids := e.plausible(seed, maxTokens)
		if content, ok := strings.CutSuffix(text, e.eosText); !ok && !tmpl.thinking() {
			return fmt.Errorf("seed %d: %q does not end with EOS", i, text)
		} else if want := tmpl.renderGeneration(content, "", nil); !tmpl.thinking() && text != want {
			return fmt.Errorf("seed %d: text %q, the template renders %q", i, text, want)
		}
		if ids == nil {
			if !tmpl.thinking() {
				return fmt.Errorf("seed %d: no ids on the plain template", i)
			}
			continue
		}
		if want := tok.Encode(text); fmt.Sprint(ids) != fmt.Sprint(want) {
			return fmt.Errorf("seed %d: ids %v, Encode %v (%q)", i, ids, want, text)
		}
	}
	return nil
}

// DecodeChatBoth decodes body with the fast chat decoder and with
// encoding/json and reports whether the fast one accepted it, whether
// encoding/json did, and a difference between their results (empty when
// they agree or the fast one declined).
func DecodeChatBoth(body []byte) (fastOK, jsonOK bool, diff string) {
	var fast, ref chatRequest
	fastOK = fast.decodeFast(body)
	jsonOK = json.Unmarshal(body, &ref) == nil
	if fastOK && !reflect.DeepEqual(fast, ref) {
		diff = fmt.Sprintf("fast %s\njson %s", dumpChat(fast), dumpChat(ref))
	}
	return fastOK, jsonOK, diff
}

func dumpChat(r chatRequest) string {
	b, _ := json.Marshal(r)
	return fmt.Sprintf("%s %#v", b, r)
}

// CanonicalHeaderKeys are the request header keys the fake looks up
// without canonicalizing them.
var CanonicalHeaderKeys = []string{headerContentType, headerRequestID, headerScript, headerFault, AgentIDHeader}

// DecodeChatFast runs the chat request decoder's fast path on body.
func DecodeChatFast(body []byte) bool {
	var r chatRequest
	return r.decodeFast(body)
}
