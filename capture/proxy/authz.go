package proxy

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
)

// RolloutTokenHeader carries a per-rollout token (docs/proxy-security.md).
// The token may also be sent as the client's API key (Authorization: Bearer
// or x-api-key), which is all most harnesses can set.
const RolloutTokenHeader = "X-Rollout-Token"

// rolloutTokenContext separates these MACs from any other use of the secret.
const rolloutTokenContext = "capbench rollout token v1\x00"

// RolloutToken is the token a client must present for rolloutID when the
// proxy runs with a rollout secret: hex(HMAC-SHA256(secret, context || id)).
// The trainer that mints rollout ids hands each agent its token; an agent
// holding one token cannot write into any other rollout.
func RolloutToken(secret, rolloutID string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(rolloutTokenContext))
	m.Write([]byte(rolloutID))
	return hex.EncodeToString(m.Sum(nil))
}

// bearerToken returns the credentials of an "Authorization: Bearer" header.
// The scheme is case-insensitive (RFC 9110 §11.1), and any amount of
// whitespace may separate it from the token.
func bearerToken(h http.Header) (string, bool) {
	v := strings.TrimSpace(h.Get("Authorization"))
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

// rolloutAuthorized checks the rollout token, wherever the client put it.
func (p *Proxy) rolloutAuthorized(h http.Header, rolloutID string) bool {
	want := []byte(RolloutToken(p.opts.RolloutSecret, rolloutID))
	cands := []string{h.Get(RolloutTokenHeader), h.Get("X-Api-Key")}
	if tok, ok := bearerToken(h); ok {
		cands = append(cands, tok)
	}
	for _, c := range cands {
		if c != "" && hmac.Equal([]byte(strings.ToLower(strings.TrimSpace(c))), want) {
			return true
		}
	}
	return false
}
