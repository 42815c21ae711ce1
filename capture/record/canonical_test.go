package record_test

import (
	"encoding/json"
	"math"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

func canonicalString(v any) string {
	GinkgoHelper()
	b, err := record.Canonical(v)
	Expect(err).NotTo(HaveOccurred())
	return string(b)
}

var _ = Describe("Canonical", func() {
	DescribeTable("formats floats as orjson 3.8 does",
		func(f float64, want string) {
			Expect(canonicalString(f)).To(Equal(want))
		},
		Entry("zero", 0.0, "0.0"),
		Entry("negative zero", math.Copysign(0, -1), "-0.0"),
		Entry("one", 1.0, "1.0"),
		Entry("integral timestamp", 1700000000.0, "1700000000.0"),
		Entry("lower plain bound", 0.00001, "0.00001"),
		Entry("just below the plain range", -9.99999e-06, "-9.99999e-6"),
		Entry("small plain", -0.0000325, "-0.0000325"),
		Entry("exponent below range", 1e-6, "1e-6"),
		Entry("exponent with fraction", -1.5e-07, "-1.5e-7"),
		Entry("smallest subnormal", 5e-324, "5e-324"),
		Entry("smallest normal", -2.2250738585072014e-308, "-2.2250738585072014e-308"),
		Entry("largest plain integral", -9999999999999998.0, "-9999999999999998.0"),
		Entry("upper bound", 1e16, "1e16"),
		Entry("above upper bound", -1.5e16, "-1.5e16"),
		Entry("huge", 1.7976931348623157e308, "1.7976931348623157e308"),
		Entry("ordinary", -123.456, "-123.456"),
		Entry("float32 widened", -0.0014757919125258923, "-0.0014757919125258923"),
		Entry("tenth", 0.1, "0.1"),
		Entry("1e15", 1e15, "1000000000000000.0"),
		Entry("NaN", math.NaN(), "null"),
		Entry("+Inf", math.Inf(1), "null"),
	)

	DescribeTable("escapes strings as orjson does",
		func(s, want string) {
			Expect(canonicalString(s)).To(Equal(want))
		},
		Entry("plain", "abc", `"abc"`),
		Entry("quote and backslash", `a"b\c`, `"a\"b\\c"`),
		Entry("short escapes", "\b\f\n\r\t", `"\b\f\n\r\t"`),
		Entry("other control characters lowercase", "\x00\x01\x1f", `"\u0000\u0001\u001f"`),
		Entry("slash, DEL and line separators raw", "/\x7f\u2028\u2029", "\"/\x7f\u2028\u2029\""),
		Entry("non-ASCII raw", "é漢🙂", "\"é漢🙂\""),
	)

	It("sorts keys by code point recursively and writes compactly", func() {
		v := map[string]any{"b": 1, "a": map[string]any{"é": true, "z": nil, "B": []any{"x", json.Number("2")}}, "B": false}
		Expect(canonicalString(v)).To(Equal(`{"B":false,"a":{"B":["x",2],"z":null,"é":true},"b":1}`))
	})

	DescribeTable("reads json.Number as Python reads a JSON number",
		func(n, want string) {
			Expect(canonicalString(json.Number(n))).To(Equal(want))
		},
		Entry("integer", "42", "42"),
		Entry("negative zero integer", "-0", "0"),
		Entry("max uint64", "18446744073709551615", "18446744073709551615"),
		Entry("min int64", "-9223372036854775808", "-9223372036854775808"),
		Entry("integral float keeps .0", "1.0", "1.0"),
		Entry("exponent is a float", "1e5", "100000.0"),
		Entry("trailing zeros dropped", "1.50", "1.5"),
		Entry("overflow to infinity", "1e400", "null"),
	)

	It("writes integer arrays at every digit width", func() {
		ids := []int{0, 9, 10, 99, 100, 151643, 999999999, 1000000000, -1, math.MaxInt64, math.MinInt64}
		Expect(canonicalString(ids)).To(Equal("[0,9,10,99,100,151643,999999999,1000000000,-1,9223372036854775807,-9223372036854775808]"))
	})

	It("encodes other Go values through their JSON form", func() {
		type call struct {
			Name string  `json:"name"`
			Args string  `json:"arguments"`
			Temp float64 `json:"temp"`
		}
		Expect(canonicalString([]map[string]any{{"b": call{Name: "<ls>", Args: "{}", Temp: 1e-7}}})).
			To(Equal(`[{"b":{"arguments":"{}","name":"<ls>","temp":1e-7}}]`))
	})

	It("re-encodes raw JSON canonically, including nested integer arrays", func() {
		Expect(canonicalString(json.RawMessage(` [ [1, 2] ,[ -0,3] ] `))).To(Equal(`[[1,2],[0,3]]`))
		Expect(canonicalString(json.RawMessage(`{"b":[1,2.0],"a":"x"}`))).To(Equal(`{"a":"x","b":[1,2.0]}`))
		Expect(canonicalString(json.RawMessage(nil))).To(Equal(`null`))
	})

	DescribeTable("refuses values without a canonical form",
		func(v any) {
			_, err := record.Canonical(v)
			Expect(err).To(MatchError(record.ErrNotCanonical))
		},
		Entry("integer beyond 64 bits", json.Number("18446744073709551616")),
		Entry("negative integer beyond 64 bits", json.Number("-9223372036854775809")),
		Entry("nested big integer", map[string]any{"a": []any{json.Number("99999999999999999999")}}),
		Entry("malformed number", json.Number("1x")),
		Entry("invalid UTF-8", "\xff"),
		Entry("invalid UTF-8 key", map[string]any{"\xfe": 1}),
		Entry("malformed raw JSON", json.RawMessage(`[1,`)),
		Entry("raw JSON with trailing data", json.RawMessage(`[1] 2`)),
		Entry("Go value encoding/json cannot encode", map[string]any{"c": make(chan int)}),
	)
})

var _ = Describe("a canonical record line (docs/store.md#canonical-json)", func() {
	It("is what MarshalCanonical writes for the example record", func() {
		const want = `{"continuation_context_digest":"","continuation_context_len":0,"continuation_fingerprint":"","created_at":1.5,"cum_len":3,"digest":"bf99633051449f0f3248b4995a7c8468b9561d7732447341916085f12ff9ff54","fingerprint_version":null,"generation_log_probs":[-0.5],"generation_token_ids":[3],"model":"","model_call_id":"c1","output_items":[],"parent_call_id":null,"parent_resolution":"root","parent_resolution_reason":"","prefix_requested":false,"prefix_supplied":false,"prompt_is_delta":false,"prompt_token_ids":[1,2],"response_id":null,"rollout_id":"r-1","routed_experts":null,"schema_version":5,"token_item_index":null}`
		e := &record.Entry{
			SchemaVersion:      record.SchemaVersion,
			RolloutID:          "r-1",
			ModelCallID:        "c1",
			PromptTokenIDs:     []int{1, 2},
			GenerationTokenIDs: []int{3},
			GenerationLogProbs: []float64{-0.5},
			CreatedAt:          1.5,
		}
		Expect(e.StampLineage(record.ResolutionRoot, "", "", nil)).To(Succeed())
		out, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(out)).To(Equal(want))

		parsed, err := record.ParseLine([]byte(want + "\n"))
		Expect(err).NotTo(HaveOccurred())
		again, err := parsed.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		Expect(again).To(Equal(out))
	})

	It("refuses to write a non-finite log-prob or created_at", func() {
		e := &record.Entry{RolloutID: "r", ModelCallID: "c", GenerationTokenIDs: []int{1}, GenerationLogProbs: []float64{math.NaN()}}
		_, err := e.MarshalCanonical()
		Expect(err).To(MatchError(record.ErrInvalid))
		e.GenerationLogProbs = []float64{math.Inf(-1)}
		_, err = e.MarshalCanonical()
		Expect(err).To(MatchError(record.ErrInvalid))
		e.GenerationLogProbs = []float64{-1}
		e.CreatedAt = math.Inf(1)
		_, err = e.MarshalCanonical()
		Expect(err).To(MatchError(record.ErrInvalid))
	})

	It("refuses an output item or extra without a canonical form", func() {
		e := &record.Entry{RolloutID: "r", ModelCallID: "c", OutputItems: []record.Item{{"n": json.Number("1e")}}}
		_, err := e.MarshalCanonical()
		Expect(err).To(MatchError(record.ErrNotCanonical))
		e = &record.Entry{RolloutID: "r", ModelCallID: "c", Extra: map[string]json.RawMessage{"x": json.RawMessage(`{`)}}
		_, err = e.MarshalCanonical()
		Expect(err).To(MatchError(record.ErrNotCanonical))
	})
})
