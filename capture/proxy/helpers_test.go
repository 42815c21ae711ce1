package proxy_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"

	"github.com/capbench/capbench/internal/fixtures"
)

// testStore is the store surface specs inspect.
type testStore interface {
	proxy.Store
	Freeze(ctx context.Context, rolloutID string) (*store.Snapshot, error)
	IsIncomplete(ctx context.Context, rolloutID string) (bool, error)
}

type reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r reply) JSON() map[string]any {
	var m map[string]any
	ExpectWithOffset(1, json.Unmarshal(r.Body, &m)).To(Succeed(), string(r.Body))
	return m
}

// do sends one request to the proxy.
func do(ctx context.Context, method, url string, body []byte, hdr map[string]string) reply {
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return reply{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return b
}

// sseEvent is one parsed SSE frame.
type sseEvent struct {
	Event string
	Data  string
}

func parseSSE(b []byte) []sseEvent {
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Data != "" || cur.Event != "" {
				out = append(out, cur)
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
		}
	}
	return out
}

func eventNames(evs []sseEvent) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Event)
	}
	return out
}

func entries(ctx context.Context, st testStore, rollout string) []*record.Entry {
	es, err := st.ReadEntries(ctx, rollout)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return es
}

func incomplete(ctx context.Context, st testStore, rollout string) bool {
	b, err := st.IsIncomplete(ctx, rollout)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return b
}

// tokenValue is a token field with a value other than null (a streamed
// chunk keeps vLLM's "prompt_token_ids":null, as the engine sends it to a
// client that did not ask for ids).
var tokenValue = regexp.MustCompile(`"(prompt_token_ids|generation_token_ids|generation_log_probs|token_ids)"\s*:\s*[^n\s]|token_id:`)

// tokenKeysIn reports whether any token field with a value appears anywhere
// in a reply.
func tokenKeysIn(b []byte) bool { return tokenValue.Match(b) }

// fixturesDir finds <repo>/../shared/fixtures, or skips the spec.
func fixturesDir() string {
	dir, ok := fixtures.Dir()
	if !ok {
		Skip("shared fixtures not found next to the repository")
	}
	return dir
}

func readFixture(rel string) []byte {
	b, err := os.ReadFile(filepath.Join(fixturesDir(), rel))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return b
}
