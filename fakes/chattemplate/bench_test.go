package chattemplate_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/capbench/capbench/fakes/chattemplate"
)

// BenchmarkRender renders a 100-turn tool loop with 20 tools (about 100 KB
// of prompt), the shape of a long agent rollout.
func BenchmarkRender(b *testing.B) {
	var tools []map[string]any
	for i := range 20 {
		tools = append(tools, map[string]any{"type": "function", "function": map[string]any{
			"name": fmt.Sprintf("tool_%d", i), "description": strings.Repeat("Does a thing. ", 20),
			"parameters": map[string]any{"type": "object", "properties": map[string]any{
				"path": map[string]any{"type": "string", "description": "A path."},
				"n":    map[string]any{"type": "integer", "minimum": 1},
			}, "required": []any{"path"}},
		}})
	}
	msgs := []chattemplate.Message{{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Fix the bug."}}
	for i := range 100 {
		msgs = append(msgs,
			chattemplate.Message{"role": "assistant", "content": nil, "reasoning": strings.Repeat("thinking ", 40),
				"tool_calls": []any{map[string]any{"type": "function", "function": map[string]any{
					"name": "tool_1", "arguments": fmt.Sprintf(`{"path":"src/file_%d.go","n":%d}`, i, i)}}}},
			chattemplate.Message{"role": "tool", "content": strings.Repeat("output line\n", 60)})
	}
	req := chattemplate.Request{Messages: msgs, Tools: tools, AddGenerationPrompt: true}
	t := chattemplate.Qwen3Thinking2507()
	out, err := t.Render(req)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := t.Render(req); err != nil {
			b.Fatal(err)
		}
	}
}
