package vllm

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"

	"github.com/capbench/capbench/internal/pyfmt"
)

// apiError is vLLM's error envelope {"error":{message,type,param,code}}.
type apiError struct {
	Status  int
	Message string
	Type    string
	Param   *string
}

func (e *apiError) Error() string { return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message) }

func strp(s string) *string { return &s }

// badRequest is a vLLM validation error: the message gets the
// " (parameter=p[, value=v])" suffix vLLM's exceptions carry.
func badRequest(msg, param string, value ...string) *apiError {
	e := &apiError{Status: http.StatusBadRequest, Type: "BadRequestError"}
	switch {
	case param != "" && len(value) > 0:
		e.Message = fmt.Sprintf("%s (parameter=%s, value=%s)", msg, param, value[0])
		e.Param = strp(param)
	case param != "":
		e.Message = fmt.Sprintf("%s (parameter=%s)", msg, param)
		e.Param = strp(param)
	default:
		e.Message = msg
	}
	return e
}

// plainBadRequest is a generic ValueError: BadRequestError, no suffix, param null.
func plainBadRequest(msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Type: "BadRequestError", Message: msg}
}

func notFoundModel(name string) *apiError {
	return &apiError{Status: http.StatusNotFound, Type: "NotFoundError", Message: fmt.Sprintf("The model `%s` does not exist.", name), Param: strp("model")}
}

// pydanticError is a request-validation error: type "Bad Request" and a
// Python dict repr of the error in the message.
func pydanticError(errType string, loc []any, msg string, input any, ctx map[string]any) *apiError {
	var b strings.Builder
	b.WriteString("1 validation error:\n  {'type': ")
	b.WriteString(pyRepr(errType))
	b.WriteString(", 'loc': (")
	for i, l := range loc {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pyRepr(l))
	}
	if len(loc) == 1 {
		b.WriteString(",")
	}
	b.WriteString("), 'msg': ")
	b.WriteString(pyRepr(msg))
	b.WriteString(", 'input': ")
	b.WriteString(pyRepr(input))
	if ctx != nil {
		b.WriteString(", 'ctx': ")
		b.WriteString(pyRepr(ctx))
	}
	b.WriteString("}")
	parts := make([]string, len(loc))
	for i, l := range loc {
		parts[i] = fmt.Sprint(l)
	}
	return &apiError{Status: http.StatusBadRequest, Type: "Bad Request", Message: b.String(), Param: strp(strings.Join(parts, "."))}
}

// pyRepr renders a decoded JSON value like Python's repr.
func pyRepr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case string:
		return pyfmt.Str(x)
	case int:
		return strconv.Itoa(x)
	case json.Number:
		return x.String()
	case float64:
		return pyfmt.Float(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys) // Go maps lose order; sorted keeps output stable
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyfmt.Str(k) + ": " + pyRepr(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	default:
		return fmt.Sprint(x)
	}
}

func writeAPIError(w http.ResponseWriter, e *apiError) {
	b := make([]byte, 0, 256)
	b = append(b, `{"error":{"message":`...)
	b = appendJSONString(b, e.Message)
	b = append(b, `,"type":`...)
	b = appendJSONString(b, e.Type)
	b = append(b, `,"param":`...)
	b = appendNullableString(b, e.Param)
	b = append(b, `,"code":`...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, "}}"...)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(e.Status)
	_, _ = w.Write(b)
}

// writeErr writes err as vLLM would: apiErrors as they are, anything else
// as an internal server error.
func writeErr(w http.ResponseWriter, err error) {
	var ae *apiError
	if errors.As(err, &ae) {
		writeAPIError(w, ae)
		return
	}
	writeAPIError(w, &apiError{Status: http.StatusInternalServerError, Type: "InternalServerError", Message: err.Error()})
}

func writeDetail(w http.ResponseWriter, status int, detail string) {
	b := append([]byte(`{"detail":`), appendJSONString(nil, detail)...)
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
