package vllm

import (
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics exposes vLLM's Prometheus metric names on a private registry.
type metrics struct {
	handler http.Handler

	promptTokens, generationTokens prometheus.Counter
	success                        *prometheus.CounterVec
	// successBy holds the counters of the finish reasons vLLM reports, so
	// a request does not hash its label to find one.
	successBy map[string]prometheus.Counter
	hists     *histogramSet
}

// The request histograms, by their index in histogramSet.
const (
	histTTFT = iota
	histITL
	histTPOT
	histE2E
	histQueue
	histInference
	histPrefill
	histDecode
	histPrompt
	histGeneration
	histMaxTokens
	histParamsN
	histIterationTokens
	numHists
)

var (
	ttftBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	requestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	iterBuckets    = []float64{1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
	nBuckets       = []float64{1, 2, 5, 10, 20}
)

// oneTwoFive returns vLLM's 1-2-5 buckets up to max.
func oneTwoFive(maxVal int) []float64 {
	var out []float64
	for exp := 1; ; exp *= 10 {
		for _, m := range []int{1, 2, 5} {
			v := m * exp
			if v > maxVal {
				return out
			}
			out = append(out, float64(v))
		}
	}
}

func newMetrics(s *Server) *metrics {
	reg := prometheus.NewRegistry()
	labels := prometheus.Labels{"model_name": s.model, "engine": "0"}
	m := &metrics{}
	gauge := func(name, help string, f func() float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels}, f))
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", func() float64 { r, _ := s.sched.counts(); return float64(r) })
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", func() float64 { _, w := s.sched.counts(); return float64(w) })
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", s.sched.usage)
	for _, reason := range []string{"capacity", "deferred"} {
		f := func() float64 { return 0 }
		if reason == "capacity" {
			f = func() float64 { _, w := s.sched.counts(); return float64(w) }
		}
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:num_requests_waiting_by_reason", Help: "Number of requests waiting, by reason.",
			ConstLabels: prometheus.Labels{"model_name": s.model, "engine": "0", "reason": reason}}, f))
	}
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "vllm:cache_config_info", Help: "Information of the LLMEngine CacheConfig", ConstLabels: prometheus.Labels{
		"block_size": "16", "cache_dtype": nonEmpty(s.opts.KVCacheDType, "auto"), "gpu_memory_utilization": strconv.FormatFloat(s.opts.GPUMemoryUtilization, 'g', -1, 64),
		"num_gpu_blocks": strconv.Itoa(s.memory.kvBlocks), "enable_prefix_caching": "True", "engine": "0",
	}}, func() float64 { return 1 }))

	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels})
		reg.MustRegister(c)
		return c
	}
	m.promptTokens = counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.")
	m.generationTokens = counter("vllm:generation_tokens_total", "Number of generation tokens processed.")
	counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.")
	counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.")
	counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.")
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels}, []string{"finished_reason"})
	reg.MustRegister(m.success)
	m.successBy = map[string]prometheus.Counter{}
	for _, r := range []string{"stop", "length", "abort", "error", "repetition"} {
		m.successBy[r] = m.success.WithLabelValues(r)
	}

	tokBuckets := oneTwoFive(s.maxModelLen)
	m.hists = newHistogramSet(labels, [numHists]histogramSpec{
		histTTFT:            {"vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets},
		histITL:             {"vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets},
		histTPOT:            {"vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", itlBuckets},
		histE2E:             {"vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", requestBuckets},
		histQueue:           {"vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", requestBuckets},
		histInference:       {"vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", requestBuckets},
		histPrefill:         {"vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", requestBuckets},
		histDecode:          {"vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", requestBuckets},
		histPrompt:          {"vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokBuckets},
		histGeneration:      {"vllm:request_generation_tokens", "Number of generation tokens processed.", tokBuckets},
		histMaxTokens:       {"vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokBuckets},
		histParamsN:         {"vllm:request_params_n", "Histogram of the n request parameter.", nBuckets},
		histIterationTokens: {"vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", iterBuckets},
	})
	reg.MustRegister(m.hists)
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	return m
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// requestTimes are the phases of one request, in seconds.
type requestTimes struct {
	queue, prefill, decode  float64
	promptTokens, genTokens int
	maxTokens               int
	finish                  string
}

func (m *metrics) observe(t requestTimes) {
	m.promptTokens.Add(float64(t.promptTokens))
	m.generationTokens.Add(float64(t.genTokens))
	if c, ok := m.successBy[t.finish]; ok {
		c.Inc()
	} else {
		m.success.WithLabelValues(t.finish).Inc()
	}
	var v [numHists]float64
	v[histTTFT] = t.queue + t.prefill
	v[histE2E] = t.queue + t.prefill + t.decode
	v[histQueue] = t.queue
	v[histInference] = t.prefill + t.decode
	v[histPrefill] = t.prefill
	v[histDecode] = t.decode
	v[histPrompt] = float64(t.promptTokens)
	v[histGeneration] = float64(t.genTokens)
	v[histMaxTokens] = float64(t.maxTokens)
	v[histParamsN] = 1
	v[histIterationTokens] = float64(t.promptTokens)
	var skip uint = 1<<histITL | 1<<histTPOT // vLLM observes no inter-token latency for one token
	if t.genTokens > 1 {
		per := t.decode / float64(t.genTokens-1)
		v[histITL], v[histTPOT], skip = per, per, 0
	}
	m.hists.observe(&v, skip)
}
