package proxy

import (
	"bufio"
	"strings"
	"time"
)

// itemIDs are the output item ids of one Responses reply, minted when the
// items are announced on a stream so the record carries the same ones.
type itemIDs struct {
	reasoning, message string
	calls              []string
}

// responsesSink turns chat chunks into Responses events. Items come in the
// order responsesFromChat builds them: reasoning, message, function calls.
type responsesSink struct {
	bw      *bufio.Writer
	id      string
	created int64
	model   any
	seq     int
	ids     itemIDs
	items   int // output items announced

	open      string // "", "reasoning", "message", "function_call"
	openIndex int
	text      strings.Builder // text of the open item
	pendingWS strings.Builder
	sawCalls  bool
	callArgs  map[int]*strings.Builder
	callIndex map[int]int // call index → output index
	callMeta  map[int][2]string
	openCall  int
	started   bool
}

func newResponsesSink(bw *bufio.Writer, id string) *responsesSink {
	return &responsesSink{bw: bw, id: id, created: time.Now().Unix(), callArgs: map[int]*strings.Builder{},
		callIndex: map[int]int{}, callMeta: map[int][2]string{}}
}

func (s *responsesSink) ev(name string, v map[string]any) error {
	v["type"] = name
	v["sequence_number"] = s.seq
	s.seq++
	b, err := marshalGeneric(v)
	if err != nil {
		return err
	}
	_, _ = s.bw.WriteString("event: " + name + "\ndata: ")
	_, _ = s.bw.Write(b)
	_, err = s.bw.WriteString("\n\n")
	return err
}

func (s *responsesSink) envelope(status string) map[string]any {
	return map[string]any{"id": s.id, "object": "response", "created_at": s.created, "status": status, "model": s.model,
		"output": []any{}, "incomplete_details": nil, "error": nil, "usage": nil}
}

func (s *responsesSink) start(c map[string]any) error {
	if s.started {
		return nil
	}
	s.started = true
	s.model = c["model"]
	if err := s.ev("response.created", map[string]any{"response": s.envelope("in_progress")}); err != nil {
		return err
	}
	return s.ev("response.in_progress", map[string]any{"response": s.envelope("in_progress")})
}

func (s *responsesSink) chunk(_ []byte, c map[string]any) error {
	if err := s.start(c); err != nil {
		return err
	}
	choices, _ := c["choices"].([]any)
	for _, ch := range choices {
		choice, ok := ch.(map[string]any)
		if !ok {
			continue
		}
		delta, _ := choice["delta"].(map[string]any)
		if r, ok := nonEmptyString(firstPresent(delta, "reasoning", "reasoning_content")); ok {
			if err := s.reasoning(r); err != nil {
				return err
			}
		}
		if t, ok := nonEmptyString(delta["content"]); ok {
			if err := s.content(t); err != nil {
				return err
			}
		}
		tcs, _ := delta["tool_calls"].([]any)
		for _, t := range tcs {
			if err := s.toolDelta(t); err != nil {
				return err
			}
		}
	}
	return nil
}

func (s *responsesSink) reasoning(r string) error {
	if s.open != "reasoning" {
		if err := s.closeItem(); err != nil {
			return err
		}
		s.ids.reasoning = "rs_" + newCallID()
		s.open, s.openIndex = "reasoning", s.items
		s.items++
		if err := s.ev("response.output_item.added", map[string]any{"output_index": s.openIndex,
			"item": map[string]any{"type": "reasoning", "id": s.ids.reasoning, "summary": []any{}, "content": []any{}}}); err != nil {
			return err
		}
	}
	s.text.WriteString(r)
	return s.ev("response.reasoning_text.delta", map[string]any{"item_id": s.ids.reasoning, "output_index": s.openIndex, "content_index": 0, "delta": r})
}

func (s *responsesSink) content(t string) error {
	if s.open == "message" {
		s.text.WriteString(t)
		return s.ev("response.output_text.delta", map[string]any{"item_id": s.ids.message, "output_index": s.openIndex, "content_index": 0, "delta": t})
	}
	s.pendingWS.WriteString(t)
	if strings.TrimSpace(s.pendingWS.String()) == "" {
		return nil
	}
	return s.flushText()
}

func (s *responsesSink) openMessage() error {
	if err := s.closeItem(); err != nil {
		return err
	}
	if s.ids.message == "" {
		s.ids.message = "msg_" + newCallID()
	}
	s.open, s.openIndex = "message", s.items
	s.items++
	if err := s.ev("response.output_item.added", map[string]any{"output_index": s.openIndex,
		"item": map[string]any{"type": "message", "id": s.ids.message, "role": "assistant", "status": "in_progress", "content": []any{}}}); err != nil {
		return err
	}
	return s.ev("response.content_part.added", map[string]any{"item_id": s.ids.message, "output_index": s.openIndex, "content_index": 0,
		"part": map[string]any{"type": "output_text", "text": "", "annotations": []any{}}})
}

func (s *responsesSink) flushText() error {
	t := s.pendingWS.String()
	s.pendingWS.Reset()
	if t == "" {
		return nil
	}
	if err := s.openMessage(); err != nil {
		return err
	}
	s.text.WriteString(t)
	return s.ev("response.output_text.delta", map[string]any{"item_id": s.ids.message, "output_index": s.openIndex, "content_index": 0, "delta": t})
}

func (s *responsesSink) toolDelta(t any) error {
	d, _ := t.(map[string]any)
	idx, err := asInt(d["index"])
	if err != nil {
		return nil
	}
	fn, _ := d["function"].(map[string]any)
	if _, ok := s.callIndex[idx]; !ok {
		id, _ := d["id"].(string)
		name, _ := fn["name"].(string)
		if id == "" && name == "" {
			return nil
		}
		if err := s.closeItem(); err != nil {
			return err
		}
		s.sawCalls = true
		s.pendingWS.Reset()
		fc := "fc_" + newCallID()
		s.ids.calls = append(s.ids.calls, fc)
		s.callIndex[idx], s.callMeta[idx], s.callArgs[idx] = s.items, [2]string{fc, id + "\x00" + name}, &strings.Builder{}
		s.open, s.openIndex, s.openCall = "function_call", s.items, idx
		s.items++
		if err := s.ev("response.output_item.added", map[string]any{"output_index": s.openIndex, "item": map[string]any{
			"type": "function_call", "id": fc, "call_id": id, "name": name, "arguments": "", "status": "in_progress"}}); err != nil {
			return err
		}
	}
	a, ok := fn["arguments"].(string)
	if !ok || a == "" {
		return nil
	}
	s.callArgs[idx].WriteString(a)
	return s.ev("response.function_call_arguments.delta", map[string]any{"item_id": s.callMeta[idx][0], "output_index": s.callIndex[idx], "delta": a})
}

// closeItem finishes the open item's events.
func (s *responsesSink) closeItem() error {
	i := s.openIndex
	defer func() { s.open = ""; s.text.Reset() }()
	switch s.open {
	case "reasoning":
		t := s.text.String()
		if err := s.ev("response.reasoning_text.done", map[string]any{"item_id": s.ids.reasoning, "output_index": i, "content_index": 0, "text": t}); err != nil {
			return err
		}
		return s.ev("response.output_item.done", map[string]any{"output_index": i, "item": map[string]any{"type": "reasoning", "id": s.ids.reasoning,
			"summary": []any{}, "content": []any{map[string]any{"type": "reasoning_text", "text": t}}}})
	case "message":
		t := s.text.String()
		part := map[string]any{"type": "output_text", "text": t, "annotations": []any{}}
		if err := s.ev("response.output_text.done", map[string]any{"item_id": s.ids.message, "output_index": i, "content_index": 0, "text": t}); err != nil {
			return err
		}
		if err := s.ev("response.content_part.done", map[string]any{"item_id": s.ids.message, "output_index": i, "content_index": 0, "part": part}); err != nil {
			return err
		}
		return s.ev("response.output_item.done", map[string]any{"output_index": i, "item": map[string]any{"type": "message", "id": s.ids.message,
			"role": "assistant", "status": "completed", "content": []any{part}}})
	case "function_call":
		meta := s.callMeta[s.openCall]
		callID, name, _ := strings.Cut(meta[1], "\x00")
		args := s.callArgs[s.openCall].String()
		if err := s.ev("response.function_call_arguments.done", map[string]any{"item_id": meta[0], "output_index": i, "arguments": args}); err != nil {
			return err
		}
		return s.ev("response.output_item.done", map[string]any{"output_index": i, "item": map[string]any{"type": "function_call", "id": meta[0],
			"call_id": callID, "name": name, "arguments": args, "status": "completed"}})
	}
	return nil
}

// end closes the last item and sends response.completed with the reply the
// record was built from (token fields stripped).
func (s *responsesSink) end(resp map[string]any) error {
	if err := s.start(resp); err != nil {
		return err
	}
	if !s.sawCalls {
		if err := s.flushText(); err != nil {
			return err
		}
	}
	if s.items == 0 {
		// responsesFromChat gives an empty generation a message item.
		if err := s.openMessage(); err != nil {
			return err
		}
	}
	if err := s.closeItem(); err != nil {
		return err
	}
	obj, err := responsesFromChat(resp, s.id, nil, &s.ids)
	if err != nil {
		return err
	}
	obj["created_at"] = s.created
	stripItemTokens(obj)
	return s.ev("response.completed", map[string]any{"response": obj})
}

// failed sends the Responses in-stream error event.
func (s *responsesSink) failed(_ []byte, message string) error {
	return s.ev("error", map[string]any{"code": "server_error", "message": message, "param": nil})
}
