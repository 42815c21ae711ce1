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

// FuzzRenderPlain checks RenderPlain against Render of the same messages as
// maps: the same prompt or the same error, for both variants, with and
// without tools and the generation prompt.
func FuzzRenderPlain(f *testing.F) {
	f.Add([]byte("system\x00Be terse.\x00user\x00hi\x00assistant\x00<think>\nok\n</think>\n\nhello\x00user\x00more"), true, false)
	f.Add([]byte("user\x00a\x00tool\x00out1\x00tool\x00out2\x00assistant\x00"), false, true)
	f.Add([]byte("robot\x00x"), true, true)
	f.Add([]byte(""), true, false)
	tools := []map[string]any{{"type": "function", "function": map[string]any{"name": "f", "parameters": map[string]any{"type": "object"}}}}
	f.Fuzz(func(tt *testing.T, spec []byte, addGen, withTools bool) {
		// spec is role, content, role, content, ... separated by NUL bytes.
		fields := strings.Split(string(spec), "\x00")
		var plain []chattemplate.PlainMessage
		var maps []chattemplate.Message
		for i := 0; i+1 < len(fields); i += 2 {
			plain = append(plain, chattemplate.PlainMessage{Role: fields[i], Content: fields[i+1]})
			maps = append(maps, chattemplate.Message{"role": fields[i], "content": fields[i+1]})
		}
		var ts []map[string]any
		if withTools {
			ts = tools
		}
		for _, tmpl := range []*chattemplate.Template{chattemplate.Qwen3(), chattemplate.Qwen3Thinking2507()} {
			want, wantErr := tmpl.Render(chattemplate.Request{Messages: maps, Tools: ts, AddGenerationPrompt: addGen})
			got, gotErr := tmpl.RenderPlain(plain, ts, addGen)
			if got != want || (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				tt.Fatalf("%s: RenderPlain = %q, %v; Render = %q, %v", tmpl.Name(), got, gotErr, want, wantErr)
			}
		}
	})
}
