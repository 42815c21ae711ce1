package bench

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// BenchmarkReadStream64 is the load generator's read of one 64-chunk SSE
// reply in vLLM's chunk format, from memory: the per-event work every
// streamed request pays on top of its reads.
func BenchmarkReadStream64(b *testing.B) {
	var sb strings.Builder
	for range 64 {
		sb.WriteString(`data: {"id":"chatcmpl-7f1c","object":"chat.completion.chunk","created":1796190779,"model":"policy","choices":[{"index":0,"delta":{"content":" tok"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString(`data: {"id":"chatcmpl-7f1c","object":"chat.completion.chunk","created":1796190779,"model":"policy","choices":[],"usage":{"prompt_tokens":5,"total_tokens":69,"completion_tokens":64}}` + "\n\ndata: [DONE]\n\n")
	body := []byte(sb.String())
	r := bytes.NewReader(body)
	br := bufio.NewReaderSize(nil, 32<<10)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		r.Reset(body)
		a := &arrival{r: r, base: time.Now()}
		br.Reset(a)
		var s Sample
		readStream(context.Background(), br, a, &s)
		if s.OutputTokens != 64 || s.Error != "" {
			b.Fatalf("read %d tokens: %s", s.OutputTokens, s.Error)
		}
	}
}

// FuzzIndexChoices checks indexChoices against bytes.Index, its definition.
func FuzzIndexChoices(f *testing.F) {
	for _, seed := range []string{
		``, `[`, `"choices":`, `"choices":[`, `"choices":[]`, `x"choices":[{"a":1}]`,
		`{"id":"[x]","choices":[{"delta":{"content":"["}}]}`,
		`{"tool_calls":[{"id":"a"}],"choices":[]}`,
		`{"a":["choices":[","choices":[1]}`,
		`"choices":["choices":[`, `choices":[`, `"c"choices":[`,
		`{"id":"chatcmpl-7f1c","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := indexChoices(data), bytes.Index(data, choicesKey); got != want {
			t.Fatalf("indexChoices(%q) = %d, bytes.Index = %d", data, got, want)
		}
	})
}
