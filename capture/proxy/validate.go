package proxy

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
)

// The proxy answers requests vLLM would reject with vLLM's own error (so a
// harness sees the same thing with or without the proxy), before anything
// is recorded or marked.

// mediaTypeMessage is FastAPI's answer to a body that is not declared JSON.
const mediaTypeMessage = "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"

// jsonContentType reports whether a request declares a JSON body, as vLLM
// requires on its POST routes (parameters such as charset are allowed).
func jsonContentType(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// streamFlag reads a request's "stream" member with pydantic's lax boolean
// rules, which vLLM's request models use: booleans, 0 and 1, and the strings
// 0/off/f/false/n/no and 1/on/t/true/y/yes in any case.
func streamFlag(v any) (bool, error) {
	switch x := v.(type) {
	case nil:
		return false, nil
	case bool:
		return x, nil
	case json.Number:
		switch string(x) {
		case "0", "0.0":
			return false, nil
		case "1", "1.0":
			return true, nil
		}
	case string:
		switch strings.ToLower(x) {
		case "0", "off", "f", "false", "n", "no":
			return false, nil
		case "1", "on", "t", "true", "y", "yes":
			return true, nil
		}
	}
	return false, fmt.Errorf("stream: not a boolean")
}

// streamValidationMessage is pydantic's error for a "stream" value it cannot
// read as a boolean, as vLLM prints it.
func streamValidationMessage(v any) string {
	return "1 validation error:\n  {'type': 'bool_parsing', 'loc': ('body', 'stream'), 'msg': 'Input should be a valid boolean, unable to interpret input', 'input': " +
		pyReprScalar(v) + "}"
}

// pyReprScalar is Python's repr of a decoded JSON scalar (containers are
// abbreviated; they never parse as booleans either).
func pyReprScalar(v any) string {
	switch x := v.(type) {
	case string:
		q := "'"
		if strings.Contains(x, "'") && !strings.Contains(x, `"`) {
			q = `"`
		}
		r := strings.NewReplacer(`\`, `\\`, "\n", `\n`, "\r", `\r`, "\t", `\t`, q, `\`+q)
		return q + r.Replace(x) + q
	case json.Number:
		return string(x)
	case map[string]any:
		return "{...}"
	case []any:
		return "[...]"
	default:
		return fmt.Sprint(x)
	}
}

// writeValidationError answers a request vLLM's validation rejects: vLLM's
// envelope for the OpenAI dialects (type "Bad Request", param = the field),
// Anthropic's for Messages with the same message.
func writeValidationError(w http.ResponseWriter, anthropicDialect bool, message, param string) {
	if anthropicDialect {
		writeAnthropicError(w, http.StatusBadRequest, message)
		return
	}
	var p any
	if param != "" {
		p = param
	}
	writeJSON(w, http.StatusBadRequest, map[string]any{"error": map[string]any{
		"message": message, "type": "Bad Request", "param": p, "code": http.StatusBadRequest,
	}})
}
