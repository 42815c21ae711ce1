package proxy

import (
	"bufio"
	"net/http"

	"github.com/capbench/capbench/capture/proxy/anthropic"
)

// messagesSink turns chat chunks into Anthropic Messages events.
type messagesSink struct {
	bw       *bufio.Writer
	id       string
	stopSeqs []string
	st       *anthropic.Stream
	started  map[int]bool
	gen      int
}

func (s *messagesSink) stream(c map[string]any) *anthropic.Stream {
	if s.st == nil {
		input := 0
		if ids, err := asIntSlice(c["prompt_token_ids"]); err == nil {
			input = len(ids)
		}
		s.st = anthropic.NewStream(s.bw, s.id, c["model"], input)
	}
	return s.st
}

func (s *messagesSink) chunk(_ []byte, c map[string]any) error {
	st := s.stream(c)
	if err := st.Start(); err != nil {
		return err
	}
	choices, _ := c["choices"].([]any)
	for _, ch := range choices {
		choice, ok := ch.(map[string]any)
		if !ok {
			continue
		}
		if ids, err := asIntSlice(choice["token_ids"]); err == nil {
			s.gen += len(ids)
		}
		delta, _ := choice["delta"].(map[string]any)
		if r, ok := nonEmptyString(firstPresent(delta, "reasoning", "reasoning_content")); ok {
			if err := st.Reasoning(r); err != nil {
				return err
			}
		}
		if t, ok := nonEmptyString(delta["content"]); ok {
			if err := st.Text(t); err != nil {
				return err
			}
		}
		tcs, _ := delta["tool_calls"].([]any)
		for _, t := range tcs {
			if err := s.toolDelta(st, t); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *messagesSink) toolDelta(st *anthropic.Stream, t any) error {
	d, _ := t.(map[string]any)
	idx, err := asInt(d["index"])
	if err != nil {
		return nil
	}
	fn, _ := d["function"].(map[string]any)
	if !s.started[idx] {
		id, _ := d["id"].(string)
		name, _ := fn["name"].(string)
		if id == "" && name == "" {
			return nil
		}
		if s.started == nil {
			s.started = map[int]bool{}
		}
		s.started[idx] = true
		if err := st.ToolStart(id, name); err != nil {
			return err
		}
	}
	if a, ok := fn["arguments"].(string); ok {
		return st.ToolArguments(a)
	}
	return nil
}

func (s *messagesSink) end(resp map[string]any) error {
	st := s.stream(resp)
	choice, _, _ := firstChoice(resp)
	n := s.gen
	if u, ok := resp["usage"].(map[string]any); ok {
		if c, err := asInt(u["completion_tokens"]); err == nil {
			n = c
		}
	}
	return st.Finish(choice["finish_reason"], choice["stop_reason"], s.stopSeqs, n)
}

func (s *messagesSink) failed(_ []byte, message string) error {
	return s.stream(map[string]any{}).Error(http.StatusInternalServerError, message)
}

// firstPresent returns the first of keys present with a non-nil value.
func firstPresent(m map[string]any, keys ...string) any {
	for _, k := range keys {
		if v, ok := m[k]; ok && v != nil {
			return v
		}
	}
	return nil
}
