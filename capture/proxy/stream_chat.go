package proxy

import (
	"bufio"
)

// chatSink relays the engine's chat chunks with the token fields the proxy
// added set to null, so the client reads what the engine would have sent it
// without them (vLLM writes null for a field it was not asked for).
type chatSink struct {
	bw           *bufio.Writer
	keepLogprobs bool // the client asked for log-probs itself
}

func (s *chatSink) frame(b []byte) error {
	_, _ = s.bw.WriteString("data: ")
	_, _ = s.bw.Write(b)
	_, err := s.bw.WriteString("\n\n")
	return err
}

func (s *chatSink) chunk(raw []byte, _ map[string]any) error {
	out, err := stripChunkTokens(raw, s.keepLogprobs)
	if err != nil {
		return err
	}
	return s.frame(out)
}

func (s *chatSink) end(map[string]any) error { return s.frame(doneMarker) }

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
