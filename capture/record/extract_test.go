package record_test

import (
	"encoding/json"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

func payload(text string) map[string]any {
	GinkgoHelper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	Expect(dec.Decode(&m)).To(Succeed())
	return m
}

var _ = Describe("Extract", func() {
	It("reads a chat reply's token bundle", func() {
		p := payload(`{"id":"chatcmpl-42","model":"pol","choices":[{"index":0,"message":{
			"role":"assistant","content":"hi",
			"prompt_token_ids":[1,2],"generation_token_ids":[3],"generation_log_probs":[-0.5]}}]}`)
		x, err := record.Extract(p)
		Expect(err).NotTo(HaveOccurred())
		Expect(x.Found).To(BeTrue())
		Expect(x.PromptTokenIDs).To(Equal([]int{1, 2}))
		Expect(x.GenerationTokenIDs).To(Equal([]int{3}))
		Expect(x.GenerationLogProbs).To(Equal([]float64{-0.5}))
		Expect(x.RoutedExperts).To(BeNil())
		Expect(x.OutputItems).To(Equal([]record.Item{{"role": "assistant", "content": "hi", "type": "message"}}))
		Expect(*x.TokenItemIndex).To(Equal(0))
		Expect(*x.ResponseID).To(Equal("chatcmpl-42"))
		// The served payload keeps its token arrays.
		msg := p["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
		Expect(msg).To(HaveKey("prompt_token_ids"))
		Expect(msg).NotTo(HaveKey("type"))
	})

	It("keeps existing type and role on a chat message", func() {
		x, err := record.Extract(payload(`{"choices":[{"message":{"type":"custom","role":null,
			"prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[-1]}}]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(x.OutputItems[0]).To(Equal(record.Item{"type": "custom", "role": nil}))
		Expect(x.ResponseID).To(BeNil())
	})

	It("reads a Responses payload whose last item carries the tokens", func() {
		x, err := record.Extract(payload(`{"id":"resp_0123","object":"response","output":[
			{"type":"reasoning","summary":[]},
			{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]},
			"junk",
			{"type":"function_call","call_id":"c","name":"f","arguments":"{}",
			 "prompt_token_ids":[1,2],"generation_token_ids":[3,4],"generation_log_probs":[-1,-2],
			 "routed_experts":[[ [1, 2] ],[[3,4]]]}]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(x.OutputItems).To(HaveLen(3), "non-object output elements are dropped")
		Expect(*x.TokenItemIndex).To(Equal(2))
		Expect(x.OutputItems[2]).To(Equal(record.Item{"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}))
		Expect(string(x.RoutedExperts)).To(Equal(`[[[1,2]],[[3,4]]]`))
		Expect(*x.ResponseID).To(Equal("resp_0123"))
	})

	It("keeps a string routed_experts envelope", func() {
		x, err := record.Extract(payload(`{"output":[{"type":"message","prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[-1],"routed_experts":"nrlre1:int16:1x1x1:AQA="}]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(x.RoutedExperts)).To(Equal(`"nrlre1:int16:1x1x1:AQA="`))
	})

	It("reports no token ids without an error", func() {
		x, err := record.Extract(payload(`{"id":"x","choices":[{"message":{"role":"assistant","content":"hi","prompt_token_ids":null}}]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(x.Found).To(BeFalse())
		Expect(x.OutputItems).To(BeEmpty())
		x, err = record.Extract(map[string]any{})
		Expect(err).NotTo(HaveOccurred())
		Expect(x.Found).To(BeFalse())
	})

	DescribeTable("fails with Gym's messages",
		func(text, message string) {
			x, err := record.Extract(payload(text))
			Expect(err).To(MatchError(record.ErrExtract))
			Expect(err.Error()).To(HaveSuffix(message))
			Expect(x).To(BeNil())
		},
		Entry("two carriers in output",
			`{"output":[{"generation_token_ids":[1]},{"prompt_token_ids":[1]}]}`,
			"multiple response items carry token metadata"),
		Entry("carriers in output and choices",
			`{"output":[{"generation_token_ids":[1]}],"choices":[{"message":{"generation_log_probs":[-1]}}]}`,
			"multiple response items carry token metadata"),
		Entry("partial: log-probs missing",
			`{"choices":[{"message":{"prompt_token_ids":[1],"generation_token_ids":[2]}}]}`,
			"partial token metadata is missing: generation_log_probs"),
		Entry("partial: two missing, in key order",
			`{"output":[{"generation_log_probs":[-1],"prompt_token_ids":null}]}`,
			"partial token metadata is missing: prompt_token_ids, generation_token_ids"),
		Entry("two chat messages carrying tokens",
			`{"choices":[{"message":{"prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[-1]}},{"message":{"generation_token_ids":[], "prompt_token_ids":null}}]}`,
			"multiple response items carry token metadata"),
	)

	DescribeTable("refuses malformed token arrays",
		func(text string) {
			_, err := record.Extract(payload(text))
			Expect(err).To(MatchError(record.ErrExtract))
		},
		Entry("ids not a list", `{"output":[{"prompt_token_ids":"1,2","generation_token_ids":[2],"generation_log_probs":[-1]}]}`),
		Entry("fractional id", `{"output":[{"prompt_token_ids":[1.5],"generation_token_ids":[2],"generation_log_probs":[-1]}]}`),
		Entry("string id", `{"output":[{"prompt_token_ids":["1"],"generation_token_ids":[2],"generation_log_probs":[-1]}]}`),
		Entry("log-prob not a number", `{"output":[{"prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[true]}]}`),
		Entry("log-prob overflow", `{"output":[{"prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[-1e999]}]}`),
		Entry("routed experts beyond 64 bits", `{"output":[{"prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[-1],"routed_experts":[99999999999999999999]}]}`),
	)

	It("accepts payloads decoded without UseNumber", func() {
		var m map[string]any
		Expect(json.Unmarshal([]byte(`{"id":"chatcmpl-1","choices":[{"message":{"content":"a","prompt_token_ids":[151644,2],"generation_token_ids":[3],"generation_log_probs":[-0.25]}}]}`), &m)).To(Succeed())
		x, err := record.Extract(m)
		Expect(err).NotTo(HaveOccurred())
		Expect(x.PromptTokenIDs).To(Equal([]int{151644, 2}))
		Expect(x.GenerationLogProbs).To(Equal([]float64{-0.25}))
	})

	It("produces items that round-trip through a record", func() {
		x, err := record.Extract(payload(`{"id":"r1","output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"é\u2028","annotations":[]}],"prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[-0.5]}]}`))
		Expect(err).NotTo(HaveOccurred())
		e := &record.Entry{SchemaVersion: record.SchemaVersion, RolloutID: "r", ModelCallID: "c",
			PromptTokenIDs: x.PromptTokenIDs, GenerationTokenIDs: x.GenerationTokenIDs, GenerationLogProbs: x.GenerationLogProbs,
			RoutedExperts: x.RoutedExperts, OutputItems: x.OutputItems, TokenItemIndex: x.TokenItemIndex, ResponseID: x.ResponseID}
		Expect(e.Validate()).To(Succeed())
		line, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		back, err := record.ParseLine(line)
		Expect(err).NotTo(HaveOccurred())
		again, err := back.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(Equal(line))
	})
})
