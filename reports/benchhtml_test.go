package reports_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/chromedp/chromedp"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/bench/driver"
	"github.com/capbench/capbench/reports"
)

// chromium finds a headless-capable browser, or skips (fails under CI=true).
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		Fail("no chromium on PATH (apt-get install chromium): the HTML report cannot be checked")
	}
	Skip("no chromium on PATH (apt-get install chromium): HTML report not checked in a browser")
	return ""
}

// checkInBrowser writes r's HTML report, opens it in headless Chromium
// and checks that at least minCharts charts were drawn, each with data, and
// that the page logged no error.
func checkInBrowser(ctx context.Context, r *bench.Result, minCharts int) {
	browser := chromium()
	dir := GinkgoT().TempDir()
	page := filepath.Join(dir, "bench.html")
	f, err := os.Create(page)
	Expect(err).NotTo(HaveOccurred())
	Expect(reports.BenchHTML(f, r)).To(Succeed())
	Expect(f.Close()).To(Succeed())
	raw, err := os.ReadFile(page)
	Expect(err).NotTo(HaveOccurred())
	Expect(string(raw)).NotTo(MatchRegexp(`(src|href)=["']?(https?:)?//`), "the report must not load anything")

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser),
		chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelA := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	// Start the browser first (the first Run's context must not time out).
	Expect(chromedp.Do(bctx)).To(Succeed())
	cctx, stopConsole := context.WithCancel(bctx)
	messages := chromedp.Console(cctx)
	var (
		mu       sync.Mutex
		problems []string
		done     = make(chan struct{})
	)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError {
				mu.Lock()
				problems = append(problems, m.String())
				mu.Unlock()
			}
		}
	}()
	tctx, cancelT := context.WithTimeout(bctx, 60*time.Second)
	defer cancelT()
	Expect(chromedp.Do(tctx, chromedp.Navigate("file://"+page), chromedp.WaitReady("body"))).To(Succeed())
	charts, err := chromedp.Run(tctx, chromedp.Evaluate[int](`window.capbenchCharts || 0`))
	Expect(err).NotTo(HaveOccurred())
	drawn, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll(".chart .uplot canvas").length`))
	Expect(err).NotTo(HaveOccurred())
	withData, err := chromedp.Run(tctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll(".chart")).filter(function (el) {
			return el.uplot && el.uplot.data.length > 1 && el.uplot.data[0].length > 0 &&
				el.uplot.data.slice(1).every(function (s) { return s.some(function (v) { return typeof v === "number" && isFinite(v); }); });
		}).length`))
	Expect(err).NotTo(HaveOccurred())
	shot, err := chromedp.Run(tctx, chromedp.FullScreenshot(100))
	Expect(err).NotTo(HaveOccurred())
	stopConsole()
	<-done
	// CAPBENCH_SCREENSHOT_DIR keeps the page and its screenshot for a look.
	if keep := os.Getenv("CAPBENCH_SCREENSHOT_DIR"); keep != "" {
		dir = keep
		Expect(os.WriteFile(filepath.Join(dir, "bench.html"), raw, 0o644)).To(Succeed())
	}
	Expect(os.WriteFile(filepath.Join(dir, "bench.png"), shot, 0o644)).To(Succeed())
	AddReportEntry("screenshot", filepath.Join(dir, "bench.png"))
	Expect(charts).To(BeNumerically(">=", minCharts), "every chart kind should be drawn for this result")
	Expect(drawn).To(Equal(charts))
	Expect(withData).To(Equal(charts), "a chart is empty")
	Expect(len(shot)).To(BeNumerically(">", 10_000))
	mu.Lock()
	defer mu.Unlock()
	Expect(problems).To(BeEmpty())
}

var _ = Describe("the HTML bench report", Label("browser"), func() {
	It("opens offline in headless Chromium with data in every chart and no console errors", func(ctx SpecContext) {
		checkInBrowser(ctx, syntheticResult(1), 8)
	}, SpecTimeout(2*time.Minute))

	It("draws a real embedded sweep, paired and scraped", func(ctx SpecContext) {
		g := driver.DefaultGPU()
		Expect(driver.PlanGPU(&g)).To(Succeed())
		res, err := driver.Run(ctx, driver.Options{Config: bench.Config{
			Target: bench.TargetEmbedded, Workload: bench.WorkloadChat, GPU: &g, Seed: 1, Requests: 12,
			Chat:   &bench.ChatSpec{Model: g.Profile, Prompt: bench.Dist{Kind: "uniform", A: 20, B: 200}, Output: bench.Dist{Kind: "fixed", A: 24}, Stream: true},
			Stages: []bench.Shape{{Arrival: bench.Closed, Concurrency: 1}, {Arrival: bench.Closed, Concurrency: 4}},
		}, ScrapeInterval: 20 * time.Millisecond})
		Expect(err).NotTo(HaveOccurred())
		// E2EL, TTFT and TPOT by percentile, throughput and latency vs
		// concurrency, the server series and the capture overhead.
		checkInBrowser(ctx, res, 7)
	}, SpecTimeout(2*time.Minute))
})
