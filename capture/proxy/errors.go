package proxy

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/capbench/capbench/capture/proxy/anthropic"
)

// writeJSON writes v as a JSON reply with one buffered write.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := marshalGeneric(v)
	if err != nil {
		http.Error(w, "encoding reply: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	// One write of the whole body: no extra buffer needed.
	_, _ = w.Write(b)
}

// openAIErrorType names an HTTP status the way vLLM's error envelope does.
func openAIErrorType(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "BadRequestError"
	case http.StatusUnauthorized:
		return "AuthenticationError"
	case http.StatusNotFound:
		return "NotFoundError"
	case http.StatusMethodNotAllowed:
		return "MethodNotAllowed"
	case http.StatusConflict:
		return "ConflictError"
	case http.StatusRequestEntityTooLarge:
		// The phrase vLLM's HTTPException handler puts in "type".
		return "Request Entity Too Large"
	case http.StatusBadGateway:
		return "BadGateway"
	default:
		if status >= 500 {
			return "InternalServerError"
		}
		return http.StatusText(status)
	}
}

// writeOpenAIError answers in the OpenAI/vLLM error envelope.
func writeOpenAIError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{
		"message": message, "type": openAIErrorType(status), "param": nil, "code": status,
	}})
}

// writeAnthropicError answers in Anthropic's error envelope; the type is
// derived from the status (vLLM's HTTPStatus phrase).
func writeAnthropicError(w http.ResponseWriter, status int, message string) {
	writeJSON(w, status, anthropic.ErrorBody(status, message))
}

// errorWriter is one of the two envelope writers; each derives the error
// type from the status, the way its API names it.
type errorWriter func(w http.ResponseWriter, status int, message string)

// writeExchangeError reports a failed upstream exchange to the client:
// upstream errors keep their status (and, for the OpenAI dialects, their
// body); transport failures become 502.
func writeExchangeError(w http.ResponseWriter, err error, errw errorWriter, passBody bool) {
	var ue *upstreamError
	if errors.As(err, &ue) {
		if passBody {
			ct := ue.ContentType
			if ct == "" {
				ct = "application/json"
			}
			w.Header().Set("Content-Type", ct)
			w.WriteHeader(ue.Status)
			_, _ = w.Write(ue.Body)
			return
		}
		errw(w, ue.Status, ue.message())
		return
	}
	var be *beginError
	if errors.As(err, &be) {
		writeRefusal(w, errw, refuse(be.rolloutID, be.err))
		return
	}
	if msg, ok := upstreamTimeoutMessage(err); ok {
		errw(w, http.StatusGatewayTimeout, msg)
		return
	}
	errw(w, http.StatusBadGateway, err.Error())
}
