package proxy

import (
	"bufio"
)

// chatSink relays the engine's chat chunks with the token fields the proxy
// added set to null, so the client reads what the engine would have sent it
// without them (vLLM writes null for a field it was not asked for).
//
// The proxy always asks for the usage chunk. For a client that did not, it
// is dropped and its system_fingerprint goes on the finish chunk instead,
// where vLLM puts it without a usage chunk; the finish chunk is held until
// then (they come back to back).
type chatSink struct {
	bw           *bufio.Writer
	keepLogprobs bool // the client asked for log-probs itself
	keepUsage    bool // the client asked for the usage chunk
	held         []byte
}

func (s *chatSink) frame(b []byte) error {
	_, _ = s.bw.WriteString("data: ")
	_, _ = s.bw.Write(b)
	_, err := s.bw.WriteString("\n\n")
	return err
}

func (s *chatSink) chunk(raw []byte, c map[string]any) error {
	out, err := stripChunkTokens(raw, s.keepLogprobs)
	if err != nil {
		return err
	}
	choices, _ := c["choices"].([]any)
	if len(choices) == 0 && c["usage"] != nil {
		return s.usageChunk(out, c)
	}
	if !s.keepLogprobs && saysNothing(choices) {
		// The chunk exists for the token ids the proxy asked for; vLLM
		// does not send it to a client that did not ask for them.
		return nil
	}
	if err := s.release(); err != nil {
		return err
	}
	if !s.keepUsage && finishing(choices) {
		s.held = out
		return nil
	}
	return s.frame(out)
}

// saysNothing reports chunks whose choices have an empty delta and no
// finish reason.
func saysNothing(choices []any) bool {
	if len(choices) == 0 {
		return false
	}
	for _, ch := range choices {
		c, ok := ch.(map[string]any)
		if !ok || c["finish_reason"] != nil {
			return false
		}
		if d, ok := c["delta"].(map[string]any); !ok || len(d) > 0 {
			return false
		}
	}
	return true
}

// finishing reports a chunk that carries a finish reason.
func finishing(choices []any) bool {
	for _, ch := range choices {
		if c, ok := ch.(map[string]any); ok && c["finish_reason"] != nil {
			return true
		}
	}
	return false
}

func (s *chatSink) usageChunk(out []byte, c map[string]any) error {
	if s.keepUsage {
		return s.frame(out)
	}
	if fp, ok := c["system_fingerprint"].(string); ok && len(s.held) > 1 {
		held := s.held[:len(s.held)-1]
		held = append(held, `,"system_fingerprint":`...)
		held, _ = appendJSONString(held, fp)
		s.held = append(held, '}')
	}
	return s.release()
}

func (s *chatSink) release() error {
	if s.held == nil {
		return nil
	}
	h := s.held
	s.held = nil
	return s.frame(h)
}

func (s *chatSink) end(map[string]any) error {
	if err := s.release(); err != nil {
		return err
	}
	return s.frame(doneMarker)
}

// failed passes vLLM's error frame and its closing [DONE] on as they are.
func (s *chatSink) failed(raw []byte, _ string) error {
	if err := s.frame(raw); err != nil {
		return err
	}
	return s.frame(doneMarker)
}

var nullJSON = []byte("null")

// stripChunkTokens rewrites one chunk with prompt_token_ids, each choice's
// token_ids, routed_experts and (unless kept) logprobs set to null; every
// other member is copied byte for byte, in order.
func stripChunkTokens(raw []byte, keepLogprobs bool) ([]byte, error) {
	dst := make([]byte, 0, len(raw))
	dst = append(dst, '{')
	n := 0
	err := eachField(raw, func(key string, val []byte) error {
		if n > 0 {
			dst = append(dst, ',')
		}
		n++
		dst, _ = appendJSONString(dst, key)
		dst = append(dst, ':')
		switch key {
		case "prompt_token_ids", keyRoutedExperts:
			dst = append(dst, nullJSON...)
		case "choices":
			dst = append(dst, '[')
			i := 0
			err := eachElem(val, func(ch []byte) error {
				if i > 0 {
					dst = append(dst, ',')
				}
				i++
				return stripChoice(&dst, ch, keepLogprobs)
			})
			if err != nil {
				return err
			}
			dst = append(dst, ']')
		default:
			dst = append(dst, val...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

func stripChoice(dst *[]byte, ch []byte, keepLogprobs bool) error {
	*dst = append(*dst, '{')
	n := 0
	err := eachField(ch, func(key string, val []byte) error {
		if n > 0 {
			*dst = append(*dst, ',')
		}
		n++
		*dst, _ = appendJSONString(*dst, key)
		*dst = append(*dst, ':')
		switch {
		case key == "token_ids" || key == "prompt_token_ids" || key == keyRoutedExperts,
			key == "logprobs" && !keepLogprobs:
			*dst = append(*dst, nullJSON...)
		default:
			*dst = append(*dst, val...)
		}
		return nil
	})
	*dst = append(*dst, '}')
	return err
}
