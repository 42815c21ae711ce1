package proxy

import "strings"

// Path segments of the rollout-correlated URL grammar (docs/capture-path.md#the-url-prefix).
const (
	rolloutSegment  = "ng-rollout"
	trainingSegment = "training-token-capture"
)

// route is a request path split into its rollout prefix and API remainder.
type route struct {
	RolloutID string // empty for unprefixed paths
	Training  bool   // the training-token-capture segment was present
	APIPath   string // the remainder used for routing, always starting with "/"
}

// parseRoute strips the rollout prefix from path. A path that starts with the
// rollout segment but has no id is treated as an unprefixed path, so it reaches
// the 404 of the API router.
func parseRoute(path string) route {
	rt := splitRoute(path)
	// A base URL configured with a trailing slash yields "//v1/..."; the
	// remainder is routed without the extra slashes.
	rt.APIPath = "/" + strings.TrimLeft(rt.APIPath, "/")
	return rt
}

func splitRoute(path string) route {
	rest, ok := strings.CutPrefix(path, "/"+rolloutSegment+"/")
	if !ok {
		return route{APIPath: path}
	}
	id, remainder, hasSlash := strings.Cut(rest, "/")
	if id == "" {
		return route{APIPath: path}
	}
	if !hasSlash {
		return route{RolloutID: id, APIPath: "/"}
	}
	remainder = "/" + remainder
	if after, ok := strings.CutPrefix(remainder, "/"+trainingSegment); ok && strings.HasPrefix(after, "/") {
		return route{RolloutID: id, Training: true, APIPath: after}
	}
	// "/ng-rollout/<id>/training-token-capture" with nothing after it: the
	// segment is the remainder itself (docs/capture-path.md#the-url-prefix), not a capture request.
	return route{RolloutID: id, APIPath: remainder}
}
