package vllm

import (
	"errors"

	"github.com/capbench/capbench/fakes/chattemplate"
	"github.com/capbench/capbench/fakes/tokenizer"
)

// textTokenizer is the part of the Qwen3 tokenizer the fake uses.
type textTokenizer interface {
	Encode(string) []int
	// EncodeCached is Encode with a segment cache (see tokenizer.SegmentCache).
	EncodeCached(string, *tokenizer.SegmentCache) []int
	Decode([]int) string
	TokenString(id int) string
	VocabSize() int
	SpecialID(tok string) (int, bool)
	IsSpecial(id int) bool
	EOSID() int
}

// promptTemplate renders chat requests and assistant generations.
type promptTemplate interface {
	renderPrompt(msgs []map[string]any, tools []map[string]any, addGenerationPrompt bool, kwargs map[string]any) (string, error)
	// renderPlain is renderPrompt for plain messages (chattemplate.RenderPlain).
	renderPlain(msgs []chattemplate.PlainMessage, tools []map[string]any, addGenerationPrompt bool) (string, error)
	// renderGeneration is the text the model emits for one assistant turn,
	// ending with the EOS token text.
	renderGeneration(content, reasoning string, calls []ScriptToolCall) string
	// thinking reports whether the prompt already opens a <think> block.
	thinking() bool
}

// qwenTemplate adapts chattemplate.Template: it appends the EOS text the
// model emits and maps template errors to vLLM's 400.
type qwenTemplate struct {
	t     *chattemplate.Template
	eos   string
	think bool
}

func (q qwenTemplate) thinking() bool { return q.think }

func (q qwenTemplate) renderPrompt(msgs []map[string]any, tools []map[string]any, addGen bool, kwargs map[string]any) (string, error) {
	return templateResult(q.t.Render(chattemplate.Request{Messages: msgs, Tools: tools, AddGenerationPrompt: addGen, ChatTemplateKwargs: kwargs}))
}

func (q qwenTemplate) renderPlain(msgs []chattemplate.PlainMessage, tools []map[string]any, addGen bool) (string, error) {
	return templateResult(q.t.RenderPlain(msgs, tools, addGen))
}

// templateResult maps a template error to vLLM's 400.
func templateResult(out string, err error) (string, error) {
	if err != nil {
		var te *chattemplate.Error
		if errors.As(err, &te) {
			ae := plainBadRequest(te.Message)
			if te.Param != "" {
				ae.Param = strp(te.Param)
			}
			return "", ae
		}
		return "", err
	}
	return out, nil
}

func (q qwenTemplate) renderGeneration(content, reasoning string, calls []ScriptToolCall) string {
	tc := make([]chattemplate.ToolCall, len(calls))
	for i, c := range calls {
		tc[i] = chattemplate.ToolCall{Name: c.Name, Arguments: c.Arguments}
	}
	return q.t.RenderAssistantGeneration(content, reasoning, tc) + q.eos
}

// newTextModel builds the tokenizer and chat template for a variant.
func newTextModel(variant string) (textTokenizer, promptTemplate, error) {
	tok := tokenizer.New()
	t := chattemplate.Qwen3()
	if variant == "thinking" {
		t = chattemplate.Qwen3Thinking2507()
	}
	return tok, qwenTemplate{t: t, eos: tok.Decode([]int{tok.EOSID()}), think: variant == "thinking"}, nil
}
