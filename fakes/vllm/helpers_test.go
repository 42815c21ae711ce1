package vllm_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

// startFake starts an in-process fake on an ephemeral port and stops it
// when the spec ends.
func startFake(opts vllm.Options) *vllm.Server {
	GinkgoHelper()
	s, err := vllm.New(opts)
	Expect(err).NotTo(HaveOccurred())
	ctx, cancel := context.WithCancel(context.Background())
	Expect(s.Start(ctx)).To(Succeed())
	DeferCleanup(func() {
		cancel()
		Expect(s.Close()).To(Succeed())
	})
	return s
}

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) json() map[string]any {
	GinkgoHelper()
	var m map[string]any
	Expect(json.Unmarshal(r.body, &m)).To(Succeed(), string(r.body))
	return m
}

func do(method, url, contentType string, body []byte, headers ...string) reply {
	GinkgoHelper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func post(url string, body any, headers ...string) reply {
	GinkgoHelper()
	b, err := json.Marshal(body)
	Expect(err).NotTo(HaveOccurred())
	return do(http.MethodPost, url, "application/json", b, headers...)
}

func get(url string, headers ...string) reply {
	GinkgoHelper()
	return do(http.MethodGet, url, "", nil, headers...)
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(body []byte) []string {
	GinkgoHelper()
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		Expect(line).To(HavePrefix("data: "))
		out = append(out, strings.TrimPrefix(line, "data: "))
	}
	return out
}

func decodeChunks(events []string) []map[string]any {
	GinkgoHelper()
	Expect(events).NotTo(BeEmpty())
	Expect(events[len(events)-1]).To(Equal("[DONE]"))
	var out []map[string]any
	for _, e := range events[:len(events)-1] {
		var m map[string]any
		Expect(json.Unmarshal([]byte(e), &m)).To(Succeed(), e)
		out = append(out, m)
	}
	return out
}

func userChat(text string, extra map[string]any) map[string]any {
	req := map[string]any{"model": vllm.DefaultModel, "messages": []any{map[string]any{"role": "user", "content": text}}}
	for k, v := range extra {
		req[k] = v
	}
	return req
}

func toInts(v any) []int {
	GinkgoHelper()
	list, ok := v.([]any)
	Expect(ok).To(BeTrue(), "want a list, got %T", v)
	out := make([]int, len(list))
	for i, x := range list {
		out[i] = int(x.(float64))
	}
	return out
}

func firstChoice(m map[string]any) map[string]any {
	GinkgoHelper()
	choices := m["choices"].([]any)
	Expect(choices).To(HaveLen(1))
	return choices[0].(map[string]any)
}

// rawPost posts a JSON body and reads the whole reply; err is the read
// error of a cut body (the status is not checked).
func rawPost(url string, body []byte, headers ...string) (string, error) {
	GinkgoHelper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}
