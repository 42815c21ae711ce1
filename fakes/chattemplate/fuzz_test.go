package chattemplate_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/capbench/capbench/fakes/chattemplate"
)

// FuzzArguments checks the Python-style re-serialisation of tool-call
// arguments against encoding/json: valid JSON keeps its value, and with
// CoerceBadArguments anything but an object becomes {}.
func FuzzArguments(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"s":"\u00e9\ud83d\ude00\n","n":[1.5e3,-0,true,null]}`, `[1]`, `{"a":`, `{"a":"\ud800"}`, ` {"x" : {} } `, `{"a":01}`} {
		f.Add(s)
	}
	strict := chattemplate.Qwen3()
	coerce := strict.CoerceBadArguments()
	const prefix = "<tool_call>\n{\"name\": \"f\", \"arguments\": "
	const suffix = "}\n</tool_call>"
	f.Fuzz(func(tt *testing.T, args string) {
		render := func(t *chattemplate.Template) string {
			out := t.RenderAssistantGeneration("", "", []chattemplate.ToolCall{{Name: "f", Arguments: args}})
			if !strings.HasPrefix(out, prefix) || !strings.HasSuffix(out, suffix) {
				tt.Fatalf("unexpected rendering %q", out)
			}
			return strings.TrimSuffix(strings.TrimPrefix(out, prefix), suffix)
		}
		var want any
		err := json.Unmarshal([]byte(args), &want)
		var outOfRange *json.UnmarshalTypeError
		if errors.As(err, &outOfRange) {
			// Numbers beyond float64 (1e700): Python loads them as inf and
			// prints Infinity; encoding/json refuses, so it is no oracle.
			return
		}
		valid := err == nil
		trimmed := bytes.TrimSpace([]byte(args))
		isObject := valid && len(trimmed) > 0 && trimmed[0] == '{'

		if got := render(coerce); !isObject && got != "{}" {
			tt.Fatalf("arguments %q are not a JSON object but rendered as %q", args, got)
		}
		got := render(strict)
		if !valid {
			if got != "{}" {
				tt.Fatalf("invalid arguments %q rendered as %q", args, got)
			}
			return
		}
		var back any
		if err := json.Unmarshal([]byte(got), &back); err != nil {
			tt.Fatalf("rendered arguments %q are not JSON: %v", got, err)
		}
		if !reflect.DeepEqual(back, want) {
			tt.Fatalf("arguments %q rendered as %q, which decodes differently", args, got)
		}
		if isObject {
			if c := render(coerce); c != got {
				tt.Fatalf("object arguments %q rendered differently: %q vs %q", args, c, got)
			}
		}
	})
}
