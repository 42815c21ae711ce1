package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// marshalGeneric encodes v exactly as json.Marshal does, without reflection
// for the generic form the proxy builds its requests and replies from
// (map[string]any, []any, string, json.Number, bool, nil, int, []int).
// Every other value (floats, typed log-probs, structs) is handed to
// json.Marshal, so the bytes stay encoding/json's own.
func marshalGeneric(v any) ([]byte, error) {
	return appendGeneric(make([]byte, 0, 512), v, 0)
}

// maxEncodeDepth is where encoding/json starts looking for pointer cycles;
// deeper values are left to it so that a cycle is reported, not followed.
const maxEncodeDepth = 1000

func appendGeneric(dst []byte, v any, depth int) ([]byte, error) {
	if depth > maxEncodeDepth {
		return appendMarshalled(dst, v)
	}
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case string:
		return appendJSONString(dst, x)
	case bool:
		return strconv.AppendBool(dst, x), nil
	case int:
		return strconv.AppendInt(dst, int64(x), 10), nil
	case json.Number:
		s := string(x)
		if s == "" {
			s = "0"
		}
		if end, ok := numberEnd([]byte(s), 0); !ok || end != len(s) {
			return appendMarshalled(dst, v) // encoding/json reports it
		}
		return append(dst, s...), nil
	case json.RawMessage:
		// The client's (or the model's) own bytes, kept for their key order.
		if x == nil {
			return append(dst, "null"...), nil
		}
		buf := bytes.NewBuffer(dst)
		if err := json.Compact(buf, x); err != nil {
			return nil, fmt.Errorf("proxy: raw JSON value: %w", err)
		}
		return buf.Bytes(), nil
	case *lazyValue:
		return appendGeneric(dst, json.RawMessage(x.raw), depth)
	case *chatMessages:
		return x.appendTo(dst, depth)
	case map[string]any:
		if x == nil {
			return append(dst, "null"...), nil
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, strings.Compare)
		dst = append(dst, '{')
		var err error
		for i, k := range keys {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendJSONString(dst, k); err != nil {
				return nil, err
			}
			dst = append(dst, ':')
			if dst, err = appendGeneric(dst, x[k], depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case []any:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		var err error
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			if dst, err = appendGeneric(dst, e, depth+1); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case []int:
		if x == nil {
			return append(dst, "null"...), nil
		}
		dst = append(dst, '[')
		for i, n := range x {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, int64(n), 10)
		}
		return append(dst, ']'), nil
	default:
		return appendMarshalled(dst, v)
	}
}

func appendMarshalled(dst []byte, v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(dst, b...), nil
}

// appendJSONString writes s quoted. Strings of printable ASCII that
// encoding/json leaves alone are copied; any other goes through
// json.Marshal, which owns the escaping rules (HTML characters, U+2028,
// invalid UTF-8).
func appendJSONString(dst []byte, s string) ([]byte, error) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return appendMarshalled(dst, s)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"'), nil
}
