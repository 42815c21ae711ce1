package vllm_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/fakes/vllm"
)

const gib = int64(1) << 30

// metricValue reads one un-labelled-beyond-defaults sample from /metrics.
func metricValue(url, name string) float64 {
	GinkgoHelper()
	body := string(get(url + "/metrics").body)
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\{[^}]*\} (\S+)$`)
	m := re.FindStringSubmatch(body)
	Expect(m).NotTo(BeNil(), name)
	v, err := strconv.ParseFloat(m[1], 64)
	Expect(err).NotTo(HaveOccurred())
	return v
}

var _ = Describe("startup checks and the memory model", func() {
	It("refuses the default 262,144 window on 48 GiB with vLLM's message", func() {
		_, err := vllm.New(vllm.Options{GPUMemory: 48 * gib})
		Expect(err).To(HaveOccurred())
		Expect(errors.Is(err, gpu.ErrKVCacheTooSmall)).To(BeTrue())
		Expect(err.Error()).To(HavePrefix("To serve at least one request with the model's max seq len (262144), (36.0 GiB KV cache is needed, which is larger than the available KV cache memory ("))
		Expect(err.Error()).To(ContainSubstring("decreasing `max_model_len` when initializing the engine"))
	})

	It("starts with --max-model-len 65536 and logs the concurrency line", func() {
		s, err := vllm.New(vllm.Options{GPUMemory: 48 * gib, MaxModelLen: 65536})
		Expect(err).NotTo(HaveOccurred())
		Expect(s.MaxModelLen()).To(Equal(65536))
		Expect(s.ConcurrencyLine()).To(MatchRegexp(`^GPU KV cache size: [0-9,]+ tokens, Maximum concurrency for 65,536 tokens per request: \d+\.\d\dx$`))
	})

	It("fits 262,144 on 48 GiB with an fp8 KV cache", func() {
		_, err := vllm.New(vllm.Options{GPUMemory: 48 * gib, KVCacheDType: "fp8"})
		Expect(err).NotTo(HaveOccurred())
	})

	It("uses the profile's window without a memory model", func() {
		s, err := vllm.New(vllm.Options{})
		Expect(err).NotTo(HaveOccurred())
		Expect(s.MaxModelLen()).To(Equal(262144))
		_, err = vllm.New(vllm.Options{MaxModelLen: 300000})
		Expect(err).To(MatchError(HavePrefix("User-specified max_model_len (300000) is greater than the derived max_model_len")))
	})

	DescribeTable("rejects bad flags with vLLM's startup text",
		func(o vllm.Options, want string) {
			_, err := vllm.New(o)
			Expect(err).To(MatchError(HavePrefix(want)))
		},
		Entry("auto tools without a parser", vllm.Options{EnableAutoToolChoice: true}, "Error: --enable-auto-tool-choice requires --tool-call-parser"),
		Entry("unknown tool parser", vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "nope"}, "invalid tool call parser: nope (chose from { "),
		Entry("unknown reasoning parser", vllm.Options{ReasoningParser: "nope"}, "invalid reasoning parser: nope (chose from { "),
		Entry("batched tokens below seqs", vllm.Options{MaxNumSeqs: 512, MaxNumBatchedTokens: 256}, "max_num_batched_tokens (256) must be greater than or equal to max_num_seqs (512)"),
		Entry("unknown template variant", vllm.Options{ChatTemplateVariant: "fancy"}, `chat template variant "fancy"`),
		Entry("unknown profile", vllm.Options{Profile: "llama"}, "--profile: unknown model profile"),
		Entry("unknown fault kind", vllm.Options{Faults: vllm.Faults{Rate: 0.5, Kinds: []string{"gremlin"}}}, `unknown fault kind "gremlin"`),
		Entry("negative body limit", vllm.Options{MaxBodyBytes: -1}, "max body bytes must not be negative, got -1"),
		Entry("negative TTFT", vllm.Options{Timing: vllm.Timing{TTFT: -time.Second}}, "TTFT must not be negative, got -1s"),
		Entry("negative inter-token latency", vllm.Options{Timing: vllm.Timing{InterTokenLatency: -time.Millisecond}}, "inter-token latency must not be negative, got -1ms"),
		Entry("negative decode rate", vllm.Options{Timing: vllm.Timing{DecodeTokensPerSecond: -3}}, "decode tokens per second must not be negative, got -3"),
		Entry("negative time scale", vllm.Options{Timing: vllm.Timing{TimeScale: -1}}, "time scale must not be negative, got -1"),
		Entry("negative stall", vllm.Options{Faults: vllm.Faults{Stall: -time.Second}}, "stall must not be negative, got -1s"),
		Entry("negative mean output length", vllm.Options{Lengths: vllm.Lengths{Mean: -10}}, "output length mean must not be negative, got -10"),
		Entry("NaN fault rate", vllm.Options{Faults: vllm.Faults{Rate: math.NaN()}}, "fault rate must be in [0, 1], got NaN"),
	)
})

var _ = Describe("scheduling", func() {
	// stalled sends n requests that hold their slot until ctx is cancelled.
	stalled := func(url string, n int, headers ...string) (context.CancelFunc, *sync.WaitGroup) {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer GinkgoRecover()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions",
					strings.NewReader(`{"messages":[{"role":"user","content":"hold"}]}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Fake-Fault", "stall")
				for i := 0; i+1 < len(headers); i += 2 {
					req.Header.Set(headers[i], headers[i+1])
				}
				resp, err := http.DefaultClient.Do(req)
				if err == nil {
					resp.Body.Close()
				}
			}()
		}
		return cancel, &wg
	}

	It("queues requests beyond max-num-seqs and shows them as waiting", func() {
		s := startFake(vllm.Options{MaxNumSeqs: 2})
		cancel, wg := stalled(s.URL(), 5)
		Eventually(func() []float64 {
			return []float64{metricValue(s.URL(), "vllm:num_requests_running"), metricValue(s.URL(), "vllm:num_requests_waiting")}
		}).Should(Equal([]float64{2, 3}))
		cancel()
		wg.Wait()
		Eventually(func() float64 { return metricValue(s.URL(), "vllm:num_requests_running") }).Should(BeZero())
		Expect(metricValue(s.URL(), "vllm:num_requests_waiting")).To(BeZero())
	})

	It("queues requests beyond KV capacity", func() {
		// 12 GiB leaves room for only a few thousand KV tokens.
		s := startFake(vllm.Options{GPUMemory: 12 * gib, MaxModelLen: 4096})
		Expect(s.SetScript(vllm.Script{Name: "big", Turns: []vllm.Turn{{Tokens: 3000, StopByLength: true}}})).To(Succeed())
		cancel, wg := stalled(s.URL(), 5, "X-Fake-Script", "big")
		Eventually(func() float64 { return metricValue(s.URL(), "vllm:num_requests_waiting") }).WithTimeout(10 * time.Second).Should(BeNumerically(">=", 1))
		running := metricValue(s.URL(), "vllm:num_requests_running")
		Expect(running).To(BeNumerically(">=", 1))
		Expect(running).To(BeNumerically("<", 5))
		Expect(metricValue(s.URL(), "vllm:kv_cache_usage_perc")).To(BeNumerically(">", 0.5))
		cancel()
		wg.Wait()
		Eventually(func() float64 { return metricValue(s.URL(), "vllm:num_requests_running") }).Should(BeZero())
	})
})

var _ = Describe("timing model", func() {
	It("reports simulated time in the latency histograms when time is scaled", func() {
		s := startFake(vllm.Options{Timing: vllm.Timing{TTFT: 2 * time.Second, InterTokenLatency: time.Second, TimeScale: 0.002}})
		Expect(s.SetScript(vllm.Script{Name: "ten", Turns: []vllm.Turn{{Content: "x", Tokens: 10}}})).To(Succeed())
		st := streamChat(s.URL(), userChat("hi", nil), "X-Fake-Script", "ten")
		Expect(st.finish).To(Equal("stop"))
		Expect(metricValue(s.URL(), "vllm:time_to_first_token_seconds_sum")).To(BeNumerically(">=", 2.0))
		Expect(metricValue(s.URL(), "vllm:request_decode_time_seconds_sum")).To(BeNumerically(">=", 9.0))
		Expect(metricValue(s.URL(), "vllm:e2e_request_latency_seconds_sum")).To(BeNumerically(">=", 11.0))
	})
})
