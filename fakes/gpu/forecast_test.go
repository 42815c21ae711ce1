package gpu_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/gpu"
)

func profile(name string) gpu.Profile {
	GinkgoHelper()
	p, err := gpu.LookupProfile(name)
	Expect(err).NotTo(HaveOccurred())
	return p
}

var _ = Describe("Model profiles from config.json", func() {
	// Geometry from each model's config.json; parameter totals as the
	// model cards state them (8.19B, 32.8B, 8.03B), to the parameter.
	DescribeTable("carry the published geometry and parameter count",
		func(name string, layers, heads, kv, headDim, hidden, inter, vocab, maxPos int, tied bool, params int64) {
			p := profile(name)
			Expect([]int{p.NumLayers, p.NumAttentionHeads, p.NumKVHeads, p.HeadDim, p.HiddenSize, p.IntermediateSize, p.VocabSize, p.MaxPositionEmbeddings}).
				To(Equal([]int{layers, heads, kv, headDim, hidden, inter, vocab, maxPos}))
			Expect(p.TieWordEmbeddings).To(Equal(tied))
			Expect(p.ParamCount).To(Equal(params))
			Expect(p.WeightBytes(2)).To(Equal(2 * params))
		},
		Entry("Qwen3-4B-Thinking-2507", "Qwen3-4B-Thinking-2507", 36, 32, 8, 128, 2560, 9728, 151936, 262144, true, int64(4_022_468_096)),
		Entry("Qwen3-8B", "Qwen3-8B", 36, 32, 8, 128, 4096, 12288, 151936, 40960, false, int64(8_190_735_360)),
		Entry("Qwen3-32B", "Qwen/Qwen3-32B", 64, 64, 8, 128, 5120, 25600, 151936, 40960, false, int64(32_762_123_264)),
		Entry("Llama-3.1-8B", "meta-llama/Llama-3.1-8B", 32, 32, 8, 128, 4096, 14336, 128256, 131072, false, int64(8_030_261_248)),
	)

	It("sizes Qwen3-32B's KV cache at 256 KiB per token in bf16", func() {
		Expect(profile("Qwen3-32B").KVBytesPerToken(2)).To(Equal(int64(2 * 64 * 8 * 128 * 2)))
	})
})

var _ = Describe("Named GPUs", func() {
	DescribeTable("resolve names and sizes",
		func(in string, wantGiB float64) {
			n, label, err := gpu.ParseDevice(in)
			Expect(err).NotTo(HaveOccurred())
			Expect(float64(n) / float64(gpu.GiB)).To(BeNumerically("~", wantGiB, 0.005))
			Expect(label).NotTo(BeEmpty())
		},
		Entry(nil, "48GiB", 48.0),
		Entry(nil, "L40S", 44.52),
		Entry(nil, "l40s", 44.52),
		Entry(nil, "RTX 6000 Ada", 47.53),
		Entry(nil, "rtx-6000-ada", 47.53),
		Entry(nil, "A100 40GB", 39.39),
		Entry(nil, "A100-80GB", 79.14),
		Entry(nil, "H100", 79.19),
		Entry(nil, "H200", 139.81),
	)

	It("names the known GPUs when one is unknown", func() {
		_, _, err := gpu.ParseDevice("TPUv9")
		Expect(errors.Is(err, gpu.ErrUnknownDevice)).To(BeTrue())
		Expect(err.Error()).To(ContainSubstring("L40S"))
		Expect(err.Error()).To(ContainSubstring("48GiB"))
		_, _, err = gpu.ParseDevice("0GiB")
		Expect(err).To(MatchError(ContainSubstring("must be positive")))
	})
})

var _ = Describe("Predict", func() {
	qwen := func() gpu.Profile { return profile("Qwen/Qwen3-4B-Thinking-2507") }

	It("refuses the model's default context on a 48 GiB card with vLLM's message, and names the largest that starts", func() {
		f, err := gpu.Predict(gpu.Config{Profile: qwen(), GPUMemoryBytes: 48 * gpu.GiB}, 32000)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Starts).To(BeFalse())
		Expect(f.Refusal.Message).To(HavePrefix("To serve at least one request with the model's max seq len (262144)"))
		Expect(f.LargestMaxModelLen).To(BeNumerically(">", 65536))
		Expect(f.LargestMaxModelLen).To(BeNumerically("<", 262144))
		Expect(f.Refusal.Message).To(ContainSubstring("estimated maximum model length is " + itoa(f.LargestMaxModelLen)))

		// The largest length does start, one block more does not.
		ok, err := gpu.Plan(gpu.Config{Profile: qwen(), GPUMemoryBytes: 48 * gpu.GiB, MaxModelLen: f.LargestMaxModelLen})
		Expect(err).NotTo(HaveOccurred())
		Expect(ok.MaxConcurrency).To(BeNumerically("~", 1.0, 1e-9))
		_, err = gpu.Plan(gpu.Config{Profile: qwen(), GPUMemoryBytes: 48 * gpu.GiB, MaxModelLen: f.LargestMaxModelLen + 16})
		Expect(errors.Is(err, gpu.ErrKVCacheTooSmall)).To(BeTrue())
	})

	It("counts concurrent 32k-token agent calls as num_blocks / ceil(len / block_size)", func() {
		f, err := gpu.Predict(gpu.Config{Profile: qwen(), GPUMemoryBytes: 48 * gpu.GiB, MaxModelLen: 65536}, 32000)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Starts).To(BeTrue())
		Expect(f.FitsRequest).To(BeTrue())
		Expect(f.ConcurrentRequests).To(Equal(int(f.Capacity.NumBlocks / 2000)))
		Expect(f.Capacity.MaxConcurrency).To(BeNumerically("~", float64(f.Capacity.NumBlocks)/4096, 1e-12))
		Expect(f.ConcurrentRequests).To(BeNumerically(">", 2*f.Capacity.MaxConcurrentRequests()-1))
	})

	It("caps concurrent calls at max_num_seqs", func() {
		f, err := gpu.Predict(gpu.Config{Profile: qwen(), GPUMemoryBytes: 141 * gpu.GiB, MaxModelLen: 65536, MaxNumSeqs: 4, MaxNumBatchedTokens: 2048}, 1000)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.ConcurrentRequests).To(Equal(4))
	})

	It("reports a context too small for the call without refusing to start", func() {
		f, err := gpu.Predict(gpu.Config{Profile: qwen(), GPUMemoryBytes: 48 * gpu.GiB, MaxModelLen: 16384}, 32000)
		Expect(err).NotTo(HaveOccurred())
		Expect(f.Starts).To(BeTrue())
		Expect(f.FitsRequest).To(BeFalse())
		Expect(f.ConcurrentRequests).To(BeZero())
	})

	It("returns bad engine arguments as refusals and a negative length as an error", func() {
		f, err := gpu.Predict(gpu.Config{Profile: qwen(), GPUMemoryBytes: 48 * gpu.GiB, KVCacheDType: "fp4"}, 1)
		Expect(err).NotTo(HaveOccurred())
		Expect(errors.Is(f.Refusal, gpu.ErrInvalidArgument)).To(BeTrue())
		_, err = gpu.Predict(gpu.Config{Profile: qwen(), GPUMemoryBytes: 48 * gpu.GiB}, -1)
		Expect(err).To(HaveOccurred())
	})

	DescribeTable("plans every profile on every named GPU with the fake's own code",
		func(model, device string, wantStart bool) {
			total, _, err := gpu.ParseDevice(device)
			Expect(err).NotTo(HaveOccurred())
			f, err := gpu.Predict(gpu.Config{Profile: profile(model), GPUMemoryBytes: total}, 32000)
			Expect(err).NotTo(HaveOccurred())
			Expect(f.Starts).To(Equal(wantStart), "refusal: %v", f.Refusal)
		},
		Entry(nil, "Qwen3-8B", "L40S", true),   // 40960 positions fit 44.52 GiB
		Entry(nil, "Qwen3-32B", "L40S", false), // 61 GiB of weights
		Entry(nil, "Qwen3-32B", "H100", false), // 61 GiB of weights leave less than the 10 GiB 40960 tokens need
		Entry(nil, "Qwen3-32B", "H200", true),
		Entry(nil, "Llama-3.1-8B", "A100 40GB", true), // 131072 tokens need 16 GiB of KV; about 18 GiB is left
		Entry(nil, "Llama-3.1-8B", "H200", true),
		Entry(nil, "Qwen3-4B-Thinking-2507", "H200", true),
		Entry(nil, "Qwen3-4B-Thinking-2507", "RTX 6000 Ada", false),
	)
})

var _ = Describe("ParseVLLMLog", func() {
	read := func(name string) (*gpu.LogFacts, error) {
		f, err := os.Open(filepath.Join("testdata", "vllm-logs", name))
		Expect(err).NotTo(HaveOccurred())
		defer f.Close()
		return gpu.ParseVLLMLog(f, 16)
	}

	DescribeTable("reads each format of the KV-cache line",
		func(name, format string, line int, loading, avail float64) {
			facts, err := read(name)
			Expect(err).NotTo(HaveOccurred())
			Expect(facts.Format).To(Equal(format))
			Expect(facts.KVCacheTokens).To(Equal(int64(236_800)))
			Expect(facts.MaxModelLen).To(Equal(65536))
			Expect(facts.MaxConcurrency).To(Equal(3.61))
			Expect(facts.Line).To(Equal(line))
			Expect(facts.ModelLoadingGiB).To(Equal(loading))
			Expect(facts.AvailableKVGiB).To(Equal(avail))
		},
		Entry("V0 blocks", "v0-blocks.log", gpu.LogFormatBlocks, 3, 7.6785, 0.0),
		Entry("V1 two lines", "v1-two-lines.log", gpu.LogFormatTwoLines, 3, 7.6785, 32.52),
		Entry("V1 merged", "v1-merged.log", gpu.LogFormatMerged, 4, 7.6785, 32.52),
	)

	It("says what it looked for when the log has no KV-cache line", func() {
		_, err := read("no-kv-line.log")
		Expect(errors.Is(err, gpu.ErrNoKVCacheLine)).To(BeTrue())
		Expect(err.Error()).To(ContainSubstring("GPU KV cache size"))
	})

	It("keeps the last restart's figures", func() {
		two := "GPU KV cache size: 1,000 tokens, Maximum concurrency for 1,000 tokens per request: 1.00x\n" +
			"GPU KV cache size: 2,000 tokens, Maximum concurrency for 1,000 tokens per request: 2.00x\n"
		facts, err := gpu.ParseVLLMLog(strings.NewReader(two), 16)
		Expect(err).NotTo(HaveOccurred())
		Expect(facts.KVCacheTokens).To(Equal(int64(2000)))
		Expect(facts.Line).To(Equal(2))
	})

	It("reports the profile's error against the log", func() {
		facts, err := read("v1-merged.log")
		Expect(err).NotTo(HaveOccurred())
		capa, err := gpu.Plan(gpu.Config{Profile: qwen(), GPUMemoryBytes: 48 * gpu.GiB, MaxModelLen: 65536})
		Expect(err).NotTo(HaveOccurred())
		deltas := gpu.CompareLog(capa, facts)
		Expect(deltas).To(HaveLen(4))
		Expect(deltas[0].Name).To(Equal("kv_cache_tokens"))
		Expect(deltas[0].ErrorPct).To(BeNumerically("~", (float64(capa.KVCacheTokens)-236800)/236800*100, 1e-9))
	})
})

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	return string(b[i:])
}
