package proxy_test

import (
	"bytes"
	"io"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
)

// readAll sends a request and reads the whole body, returning the read error.
func readAllErr(ctx SpecContext, url string, body []byte, hdr map[string]string) (int, []byte, error) {
	GinkgoHelper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

var _ = Describe("an upstream stream cut mid-way", func() {
	DescribeTable("is cut for the client too on the relayed paths",
		func(ctx SpecContext, path string) {
			fake := startFake()
			p := startProxy(ctx, fake.URL(), store.NewMemoryStore(), nil)
			body := mustJSON(map[string]any{"model": "policy", "stream": true, "max_tokens": 40,
				"messages": []any{map[string]any{"role": "user", "content": "tell me a story"}}})
			status, got, err := readAllErr(ctx, p.URL()+path, body, map[string]string{"X-Fake-Fault": vllm.FaultDropMidStream})
			Expect(status).To(Equal(200))
			Expect(err).To(MatchError(io.ErrUnexpectedEOF), "the client must see a cut stream, not a clean end")
			Expect(string(got)).NotTo(ContainSubstring("[DONE]"))
		},
		Entry("plain", "/v1/chat/completions"),
		Entry("summary (rollout prefix, no capture)", "/ng-rollout/s1/v1/chat/completions"),
	)
})
