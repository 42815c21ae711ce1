package proxy_test

import (
	"io"
	"net/http"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/internal/tmpfs"
)

var _ = Describe("the capture disk filling up", func() {
	It("fails a new rollout's call with a retryable 503 naming the disk, and exports the failures", func(ctx SpecContext) {
		root, unmount, err := tmpfs.Mount(GinkgoT().TempDir(), 1<<20)
		if err != nil {
			if os.Getenv("CI") == "true" {
				Fail("a full-disk spec needs a tmpfs mount: " + err.Error())
			}
			Skip("a full-disk spec needs a tmpfs mount (root): " + err.Error())
		}
		DeferCleanup(unmount)
		dir := filepath.Join(root, "capture")
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		fake := startFake()
		p := startProxy(ctx, fake.URL(), fs, func(o *proxy.Options) { o.RequestTokenIDs = true })
		body := mustJSON(map[string]any{"model": "policy", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		url := p.URL() + "/ng-rollout/full-1/training-token-capture/v1/chat/completions"
		Expect(do(ctx, "POST", url, body, nil).Status).To(Equal(200))

		filler, err := tmpfs.Fill(root)
		Expect(err).NotTo(HaveOccurred())
		r := do(ctx, "POST", p.URL()+"/ng-rollout/full-2/training-token-capture/v1/chat/completions", body, nil)
		Expect(r.Status).To(Equal(http.StatusServiceUnavailable), string(r.Body))
		Expect(r.Header.Get("Retry-After")).To(Equal("10"))
		Expect(string(r.Body)).To(ContainSubstring("capture"))
		Expect(string(r.Body)).To(ContainSubstring("disk is full"))
		Expect(string(r.Body)).NotTo(ContainSubstring(dir))

		resp, err := http.Get(p.URL() + "/metrics")
		Expect(err).NotTo(HaveOccurred())
		m, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(m)).To(MatchRegexp(`capbench_proxy_capture_write_failures_total\{cause="disk_full"\} [1-9]`))
		Expect(string(m)).To(ContainSubstring("capbench_proxy_capture_disk_size_bytes 1.048576e+06"))
		Expect(string(m)).To(MatchRegexp(`capbench_proxy_capture_disk_free_bytes \d`))

		Expect(os.Remove(filler)).To(Succeed())
		Expect(do(ctx, "POST", p.URL()+"/ng-rollout/full-2/training-token-capture/v1/chat/completions", body, nil).Status).To(Equal(200))
	})
})
