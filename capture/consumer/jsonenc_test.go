package consumer_test

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
)

// stdJSON is what the consumer's encoder must reproduce byte for byte.
func stdJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	Expect(enc.Encode(v)).To(Succeed())
	return bytes.TrimRight(b.Bytes(), "\n")
}

var _ = Describe("the consumer's JSON encoder", func() {
	shared := []int{5, 17, -3, 151000, 0, 9}
	DescribeTable("writes exactly encoding/json's bytes",
		func(v any) {
			got, err := consumer.MarshalNoEscape(v)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(got)).To(Equal(string(stdJSON(v))))
		},
		Entry("null", nil),
		Entry("plain and escaped strings", []any{"abc", "a\"b\\c", "tab\there\nnl", "<html>&amp;", "\u2028\u2029", "héllo", "\x00\x1f", "bad\xffutf8"}),
		Entry("floats either side of the exponent switch", []any{0.0, math.Copysign(0, -1), 1e-6, 9.99e-7, 1e20, 1e21, 1.5e300, 5e-324, -0.8065, 123456789.125, 1e-9}),
		Entry("log-prob arrays", []float64{-0.5, -1e-7, -3.25, 0}),
		Entry("ints and token arrays", []any{0, -1, math.MaxInt64, []int{}, []int(nil), []int{1, 2, 3}}),
		Entry("prefixes of one backing array, longest first and last",
			[]any{shared[:6], shared[:2], shared[:4], shared[:6], shared[1:3]}),
		Entry("nested maps with unsorted keys", map[string]any{"z": 1, "a": map[string]any{"y": []any{true, false, nil}, "b": "x"}, "m": json.Number("1.50")}),
		Entry("a slice of maps", []map[string]any{{"b": 1.0, "a": "x"}, nil}),
		Entry("other types go through encoding/json", []any{struct {
			A int `json:"a"`
		}{3}, json.RawMessage(`{"k": [1, 2]}`), map[string]int{"b": 2, "a": 1}}),
	)

	It("writes encoding/json's bytes for random rebuilt outputs sharing a running prompt", func() {
		rng := rand.New(rand.NewPCG(7, 8))
		for range 50 {
			running := make([]int, 0, 400)
			var output []any
			for range rng.IntN(8) + 1 {
				for range rng.IntN(40) {
					running = append(running, rng.IntN(200000)-10)
				}
				lp := make([]float64, rng.IntN(5))
				for i := range lp {
					lp[i] = -rng.ExpFloat64() * math.Pow(10, float64(rng.IntN(12)-8))
				}
				output = append(output, map[string]any{"type": "message", "content": "t<" + string(rune('a'+rng.IntN(26))),
					"prompt_token_ids": running[:len(running):len(running)], "generation_log_probs": lp})
			}
			got, err := consumer.MarshalNoEscape(output)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(got)).To(Equal(string(stdJSON(output))))
		}
	})

	It("refuses a non-finite float as encoding/json does", func() {
		_, err := consumer.MarshalNoEscape([]float64{math.NaN()})
		Expect(err).To(MatchError(ContainSubstring("unsupported value")))
	})
})

var _ = Describe("a finalized record of a long chained rollout", func() {
	It("carries the rebuilt output encoding/json would write", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		writeChainRollout(GinkgoT(), dir, "long-0", 40, 300, 64, rand.New(rand.NewPCG(5, 6)))
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		res, err := consumer.Consume(ctx, fs, "long-0", consumer.Input{}, consumer.DefaultOptions())
		Expect(err).NotTo(HaveOccurred())
		Expect(res.RebuiltResponse).NotTo(BeNil())
		got, err := consumer.MarshalNoEscape(res.RebuiltResponse)
		Expect(err).NotTo(HaveOccurred())
		Expect(len(got)).To(BeNumerically(">", 1<<20))
		Expect(bytes.Equal(got, stdJSON(res.RebuiltResponse))).To(BeTrue())
		line, err := res.MarshalJSON()
		Expect(err).NotTo(HaveOccurred())
		Expect(bytes.Contains(line, got)).To(BeTrue())
	})
})
