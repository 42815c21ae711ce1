package proxy_test

import (
	"bytes"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("the capture disk's sync metrics", func() {
	// metric reads one sample's value from the proxy's /metrics.
	metric := func(url, name string) float64 {
		m := metricsPage(url)
		found := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindSubmatch(m)
		Expect(found).NotTo(BeNil(), "no %s in /metrics", name)
		v, err := strconv.ParseFloat(string(found[1]), 64)
		Expect(err).NotTo(HaveOccurred())
		return v
	}

	It("count each captured call's durable record once and the syncs that covered them", func(ctx SpecContext) {
		fs, err := store.NewFileStore(GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		fake := startFake()
		p := startProxy(ctx, fake.URL(), fs, func(o *proxy.Options) { o.RequestTokenIDs = true })
		Expect(metric(p.URL(), "capbench_proxy_capture_synced_appends_total")).To(BeZero())

		body := mustJSON(map[string]any{"model": "policy", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		const calls = 5
		for i := range calls {
			url := p.URL() + "/ng-rollout/synced-" + strconv.Itoa(i) + "/training-token-capture/v1/chat/completions"
			Expect(do(ctx, "POST", url, body, nil).Status).To(Equal(200))
		}
		// One at a time, each call's record is synced alone: its own file's
		// fdatasync, and no intent sync (the record covers it).
		Expect(metric(p.URL(), "capbench_proxy_capture_synced_appends_total")).To(Equal(float64(calls)))
		Expect(metric(p.URL(), `capbench_proxy_capture_syncs_total{kind="file"}`)).To(Equal(float64(calls)))
		Expect(metric(p.URL(), `capbench_proxy_capture_syncs_total{kind="file_system"}`)).To(BeZero())
		Expect(metric(p.URL(), "capbench_proxy_capture_sync_seconds_total")).To(BeNumerically(">", 0))

		st, ok, err := proxy.ParseSyncMetrics(bytes.NewReader(metricsPage(p.URL())))
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		Expect(st.Appends).To(Equal(uint64(calls)))
		Expect(st.FileSyncs).To(Equal(uint64(calls)))
		Expect(st.FileSystemSyncs).To(BeZero())
		Expect(st.Busy).To(BeNumerically(">", 0))
	})

	It("are absent for a store that does not sync, and a page that is not Prometheus text is an error", func(ctx SpecContext) {
		fake := startFake()
		p := startProxy(ctx, fake.URL(), store.NewMemoryStore(), nil)
		_, ok, err := proxy.ParseSyncMetrics(bytes.NewReader(metricsPage(p.URL())))
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeFalse())

		_, _, err = proxy.ParseSyncMetrics(strings.NewReader("<html>not metrics</html>\n"))
		Expect(err).To(MatchError(ContainSubstring("parse /metrics")))
	})
})

func metricsPage(url string) []byte {
	resp, err := http.Get(url + "/metrics")
	Expect(err).NotTo(HaveOccurred())
	defer func() { _ = resp.Body.Close() }()
	m, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	return m
}
