package proxy

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/capbench/capbench/capture/store"
)

// A refused call must fail in a way harnesses do not retry: the Anthropic
// and OpenAI SDKs retry 408, 409, 429 and every 5xx (Claude Code retried a
// frozen rollout for over a minute on a 409). Refusals that a retry cannot
// cure therefore answer 400, 410 or 424 with "x-should-retry: false", which
// both SDKs honour, and a message that says what to do instead.

// diskFullRetryAfter is the Retry-After of a call refused because the
// capture disk is full: space can come back, so that one refusal is 503.
const diskFullRetryAfter = "10"

// refusal is how one begin_call failure is answered.
type refusal struct {
	status     int
	message    string
	retryAfter string // only for transient refusals
}

// refuse maps a begin_call failure of rolloutID to its answer. Client
// messages never carry the store's paths; the log line has the error.
func refuse(rolloutID string, err error) refusal {
	id := strconv.Quote(rolloutID)
	switch {
	case errors.Is(err, store.ErrInvalidRolloutID):
		return refusal{status: http.StatusBadRequest, message: fmt.Sprintf(
			"rollout id %s cannot be captured: %v. Use an id of ASCII letters, digits, '.', '_' and '-' in the base URL "+
				".../ng-rollout/<rollout id>/training-token-capture", id, err)}
	case errors.Is(err, store.ErrFrozen):
		return refusal{status: http.StatusGone, message: fmt.Sprintf(
			"rollout %s is frozen: its calls were handed to the consumer, so no further call can be recorded in it. "+
				"Start a new attempt under a new rollout id, and consume a rollout only after it has ended", id)}
	case errors.Is(err, store.ErrRetired):
		return refusal{status: http.StatusGone, message: fmt.Sprintf(
			"rollout %s is retired: it was consumed and delivered, so no further call can be recorded in it. "+
				"Start a new attempt under a new rollout id", id)}
	case errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT):
		return refusal{status: http.StatusServiceUnavailable, retryAfter: diskFullRetryAfter, message: fmt.Sprintf(
			"the capture store's disk is full: the call intent of rollout %s could not be written, so the call was not sent "+
				"to the model. Free space on the capture disk", id)}
	default:
		return refusal{status: http.StatusFailedDependency, message: fmt.Sprintf(
			"the capture store cannot write rollout %s (%s), so the call was not sent to the model. "+
				"Check the proxy's log and that its --capture-dir is writable", id, storeErrorKind(err))}
	}
}

// storeErrorKind names a store failure without its paths.
func storeErrorKind(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	if errors.Is(err, store.ErrCorrupt) {
		return store.ErrCorrupt.Error()
	}
	return "store error"
}

// writeRefusal answers a refused call in the dialect's envelope.
func writeRefusal(w http.ResponseWriter, errw errorWriter, rf refusal) {
	if rf.retryAfter != "" {
		w.Header().Set("Retry-After", rf.retryAfter)
	} else {
		w.Header().Set("X-Should-Retry", "false")
	}
	errw(w, rf.status, rf.message)
}

// servedRoutes lists the API routes, for the 404 of an unknown one.
const servedRoutes = "POST /v1/chat/completions, /v1/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens; GET /v1/models, /health"

// doubledV1 recognises a base URL that already ends in /v1: Anthropic
// clients (Claude Code's ANTHROPIC_BASE_URL) append /v1/messages themselves.
func doubledV1(apiPath string) bool {
	return strings.HasPrefix(apiPath, "/v1/v1/") || apiPath == "/v1/v1"
}

// unknownRouteMessage is the 404 message of a path the proxy does not serve
// under a rollout prefix (or a doubled /v1 anywhere).
func unknownRouteMessage(rt route) string {
	if doubledV1(rt.APIPath) {
		return fmt.Sprintf("no route %s: the path has /v1 twice, so the base URL ends in /v1 and the client appends /v1 itself. "+
			"Remove the trailing /v1 from the base URL (e.g. ANTHROPIC_BASE_URL=http://<proxy>/ng-rollout/<rollout id>/training-token-capture)",
			strconv.Quote(rt.APIPath))
	}
	prefix := "/ng-rollout/" + rt.RolloutID
	if rt.Training {
		prefix += "/training-token-capture"
	}
	hint := ""
	switch rt.APIPath {
	case "/chat/completions", "/completions", "/responses", "/messages":
		hint = " (the base URL must end in /v1 for OpenAI clients: .../training-token-capture/v1)"
	}
	return fmt.Sprintf("unknown API path %s under %s%s; the routes are %s", strconv.Quote(rt.APIPath), prefix, hint, servedRoutes)
}
