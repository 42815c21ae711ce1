package proxy

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

// genericSeeds cover every branch of the generic parser, including input it
// must refuse (and leave to encoding/json).
var genericSeeds = []string{
	`{"model":"m","max_tokens":5,"temperature":0.7,"stop":null,"stream":false,"x":true,"messages":[{"role":"user","content":"hi"}]}`,
	`{"a":"esc \"q\" \u00e9 \n","b":"ümlaut","c":"\xff\xfe bad utf8","d":[1,-0,0.5,1e3,-2.5E-7,12345678901234567890]}`,
	` {"nested":{"deep":[[[{}]],[],""]}} `, `{"dup":1,"dup":2}`, `{}`, `[]`, `null`, `"s"`, `12`,
	`{"x":1}x`, `{"x":}`, `{"x":01}`, `{"x":1.}`, `{"x":-}`, `{"x":1e}`, `{"x":tru}`, `{"x":"a` + "\x01" + `"}`,
	`{"x":"\q"}`, `{"x":1,}`, `[1,]`, `{"x" 1}`, `{"x":1} {}`, `{"x":[1 2]}`, `{"x":"\ud800"}`,
}

// FuzzParseGeneric checks the generic parser against encoding/json with
// UseNumber: whatever it accepts must equal encoding/json's value exactly,
// and input encoding/json rejects must never be accepted.
func FuzzParseGeneric(f *testing.F) {
	for _, s := range genericSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := parseGeneric(raw)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var want any
		err := dec.Decode(&want)
		if err == nil && dec.More() {
			err = errShape
		}
		if err == nil {
			// encoding/json's Decoder tolerates a stray closing bracket after
			// the value; the parser need not.
			if _, terr := dec.Token(); terr == nil {
				err = errShape
			}
		}
		if !ok {
			return // the callers fall back to encoding/json
		}
		if err != nil {
			t.Fatalf("accepted %q, which encoding/json rejects: %v", raw, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("parse of %q differs:\n got %#v\nwant %#v", raw, got, want)
		}
		checkMembers(t, raw, got)
	})
}

// checkMembers checks that the members parseGenericMembers returns beside
// the object are the ones newRawObject splits out of the same bytes.
func checkMembers(t *testing.T, raw []byte, parsed any) {
	t.Helper()
	obj, isObject := parsed.(map[string]any)
	m, members, ok := parseGenericMembers(raw, "", nil)
	if !isObject {
		if ok {
			t.Fatalf("parseGenericMembers accepted %q, which is not an object", raw)
		}
		return
	}
	if !ok || !reflect.DeepEqual(m, obj) {
		t.Fatalf("parseGenericMembers of %q: ok %v, %#v; parseGeneric gave %#v", raw, ok, m, obj)
	}
	split := newRawObject(raw, m)
	if split == nil {
		t.Fatalf("the splitter refused %q, which the parser read", raw)
	}
	if len(members) != len(split.members) {
		t.Fatalf("%q: %d members from the parse, %d from the splitter", raw, len(members), len(split.members))
	}
	for i := range members {
		if members[i].key != split.members[i].key || !bytes.Equal(members[i].raw, split.members[i].raw) {
			t.Fatalf("%q: member %d is %q=%q from the parse, %q=%q from the splitter", raw, i,
				members[i].key, members[i].raw, split.members[i].key, split.members[i].raw)
		}
	}
	for key := range obj { // each member left undecoded in turn reads back the same
		lm, lmembers, ok := parseGenericMembers(raw, key, nil)
		if !ok || !reflect.DeepEqual(decoded(lm), obj) || !reflect.DeepEqual(lmembers, members) {
			t.Fatalf("%q with %q undecoded: ok %v, %#v", raw, key, ok, decoded(lm))
		}
		if isList(lm[key]) != isList(obj[key]) {
			t.Fatalf("%q: undecoded %q is read as a list when it is not, or the other way round", raw, key)
		}
	}
}

// FuzzMarshalGeneric checks the generic encoder against json.Marshal byte for
// byte, on every value encoding/json decodes from the input and on the
// typed values the proxy mixes in.
func FuzzMarshalGeneric(f *testing.F) {
	for _, s := range genericSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte(`{"html":"<a href=\"x\">&</a>","ls":"\u2028\u2029","ctl":"\u0001\u007f","k<":{"z":1,"a":2,"B":3}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		typed := map[string]any{
			"value": v, "ints": []int{1, -2}, "nil_ints": []int(nil), "nil_list": []any(nil),
			"nil_map": map[string]any(nil), "float": 0.1, "int": -7, "empty_number": json.Number(""),
			"raw_string": string(raw), "logprobs": &chatLogprobs{raw: json.RawMessage(`{"content": null}`)},
		}
		for _, val := range []any{v, typed, string(raw), json.Number(raw)} {
			want, werr := json.Marshal(val)
			got, gerr := marshalGeneric(val)
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("errors differ for %#v: json %v, generic %v", val, werr, gerr)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("encodings differ for %#v:\n got %s\nwant %s", val, got, want)
			}
		}
	})
}
