package lineage_test

import (
	"encoding/json"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/lineage"
)

// items decodes a JSON array the way the proxy does (numbers as json.Number).
func items(text string) []any {
	GinkgoHelper()
	var out []any
	dec := json.NewDecoder(stringsReader(text))
	dec.UseNumber()
	Expect(dec.Decode(&out)).To(Succeed())
	return out
}

const (
	chatToolExchange = `[{"role":"user","content":"list files"},
		{"role":"assistant","content":null,"tool_calls":[{"id":"call_9","type":"function","function":{"name":"bash","arguments":"{\"cmd\": \"ls\"}"}}]},
		{"role":"tool","tool_call_id":"call_9","content":"a.txt"}]`
	anthropicToolExchange = `[{"role":"user","content":"list files"},
		{"role":"assistant","content":[{"type":"tool_use","id":"call_9","name":"bash","input":{"cmd":"ls"}}]},
		{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_9","content":"a.txt"}]}]`
	responsesToolExchange = `[{"role":"user","content":"list files"},
		{"type":"function_call","call_id":"call_9","name":"bash","arguments":"{\"cmd\":\"ls\"}"},
		{"type":"function_call_output","call_id":"call_9","output":"a.txt"}]`
	toolFingerprint = "4b4a633a3f31ad2b4d8a99e2c1abe02022a9e947613f8f1c1a912fb8f96fe49f"
)

var _ = Describe("the §5.4 vectors", func() {
	DescribeTable("assistant fingerprint and conversation digest",
		func(text, fingerprint, digest string) {
			fp, err := lineage.AssistantFingerprint(items(text))
			Expect(err).NotTo(HaveOccurred())
			Expect(fp).To(Equal(fingerprint))
			if digest != "" {
				d, err := lineage.ConversationDigest(items(text))
				Expect(err).NotTo(HaveOccurred())
				Expect(d).To(Equal(digest))
			}
		},
		Entry("plain exchange", `[{"role":"user","content":"Add 2 and 3."},{"role":"assistant","content":"5"}]`,
			"91d27805c9a1782c29cf82a4b06e98819699955fc0a0b38da017a5ccfeae3216",
			"5593906380c41d8962c270b8e6f0a8e77463ab8f66a3b12f4d8c30c08bcd59b6"),
		Entry("chat tool call", chatToolExchange, toolFingerprint,
			"df45b6167a77a024dc2a5a262d379019d54b3ba8555467056b1bf722200bc4e6"),
		Entry("Anthropic blocks", anthropicToolExchange, toolFingerprint,
			"b60324013d6687b2eb31823284dafb6f069b8df7f0645759b78561f2086b5a7b"),
		Entry("Responses items", responsesToolExchange, toolFingerprint,
			"22a1c1313d452856b17ec6db1057a2cd42531d069cd113b88b5a42cc027804c6"),
		Entry("Responses output message", `[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]}]`,
			"aa8344c9fe2785ec0dd4f0bf15d206e56ac10c6089b308fea1b52d8a47239ecd", ""),
		Entry("no model-authored item", `[{"role":"user","content":"hi"}]`,
			"", "7c82d013a73f61e1b9de7282dbaa6ef3b5123eda1eb579f943a7e07d08168440"),
	)

	It("ignores instruction content in the v3 digest but counts its role", func() {
		monday, err := lineage.ConversationDigest(items(`[{"role":"system","content":"Today is Monday"},{"role":"user","content":"hi"}]`))
		Expect(err).NotTo(HaveOccurred())
		Expect(monday).To(Equal("51a68c8c8ba3c38a24c10e15315f13de2a35dc6f25a1fb7dbc9922b26d1f43be"))
		tuesday, err := lineage.ConversationDigest(items(`[{"role":"developer","content":"Today is Tuesday"},{"role":"user","content":"hi"}]`))
		Expect(err).NotTo(HaveOccurred())
		Expect(tuesday).NotTo(Equal(monday), "the role still counts")
		tuesday, err = lineage.ConversationDigest(items(`[{"role":"system","content":[{"type":"text","text":"Today is Tuesday"}]},{"role":"user","content":"hi"}]`))
		Expect(err).NotTo(HaveOccurred())
		Expect(tuesday).To(Equal(monday))
	})

	It("hashes a namespaced function call as <namespace>__<name> (v3)", func() {
		fp, err := lineage.AssistantFingerprint(items(`[{"type":"function_call","namespace":"fs","name":"ls","call_id":"c","arguments":"{}"}]`))
		Expect(err).NotTo(HaveOccurred())
		Expect(fp).To(HavePrefix("8fd14a56"))
		Expect(fp).To(HaveSuffix("8a22"))
		same, err := lineage.AssistantFingerprint(items(`[{"type":"function_call","name":"fs__ls","call_id":"c","arguments":"{}"}]`))
		Expect(err).NotTo(HaveOccurred())
		Expect(same).To(Equal(fp))
		plain, err := lineage.AssistantFingerprint(items(`[{"type":"function_call","namespace":"","name":"ls","call_id":"c","arguments":"{}"}]`))
		Expect(err).NotTo(HaveOccurred())
		Expect(plain).NotTo(Equal(fp))
	})
})

var _ = Describe("AssistantFingerprint details", func() {
	fp := func(text string) string {
		GinkgoHelper()
		s, err := lineage.AssistantFingerprint(items(text))
		Expect(err).NotTo(HaveOccurred())
		return s
	}

	It("stringifies a null name as None, unlike an absent one", func() {
		withNull := fp(`[{"type":"function_call","call_id":"c","name":null,"arguments":"{}"}]`)
		withNone := fp(`[{"type":"function_call","call_id":"c","name":"None","arguments":"{}"}]`)
		absent := fp(`[{"type":"function_call","call_id":"c","arguments":"{}"}]`)
		empty := fp(`[{"type":"function_call","call_id":"c","name":"","arguments":"{}"}]`)
		Expect(withNull).To(Equal(withNone))
		Expect(absent).To(Equal(empty))
		Expect(absent).NotTo(Equal(withNull))
	})

	It("does not care how arguments were serialised, but cares about their values", func() {
		a := fp(`[{"type":"function_call","call_id":"c","name":"f","arguments":"{\"q\": 1, \"a\": [1.0, \"é\"]}"}]`)
		b := fp(`[{"type":"function_call","call_id":"c","name":"f","arguments":{"a":[1.0,"\u00e9"],"q":1}}]`)
		c := fp(`[{"type":"function_call","call_id":"c","name":"f","arguments":"{\"q\":2,\"a\":[1.0,\"é\"]}"}]`)
		Expect(a).To(Equal(b))
		Expect(a).NotTo(Equal(c))
	})

	It("trims arguments that are not JSON and accepts Python's NaN literal", func() {
		Expect(fp(`[{"type":"function_call","call_id":"c","name":"f","arguments":"  not json "}]`)).
			To(Equal(fp(`[{"type":"function_call","call_id":"c","name":"f","arguments":"not json"}]`)))
		Expect(fp(`[{"type":"function_call","call_id":"c","name":"f","arguments":"{\"x\": NaN}"}]`)).
			To(Equal(fp(`[{"type":"function_call","call_id":"c","name":"f","arguments":{"x":null}}]`)))
	})

	It("follows Python's reading of odd shapes", func() {
		By("a null tool_calls entry is an empty call")
		Expect(fp(`[{"role":"assistant","content":"x","tool_calls":[null]}]`)).
			To(Equal(fp(`[{"role":"assistant","content":"x","tool_calls":[{"id":"","function":{"name":"","arguments":null}}]}]`)))
		By("a falsy block type counts as no type")
		Expect(fp(`[{"role":"assistant","content":[{"type":0,"text":"hi"}]}]`)).To(Equal(fp(`[{"role":"assistant","content":"hi"}]`)))
		By("a numeric call id is stringified")
		Expect(fp(`[{"type":"function_call","call_id":7,"name":"f","arguments":"{}"}]`)).
			To(Equal(fp(`[{"type":"function_call","call_id":"7","name":"f","arguments":"{}"}]`)))
		By("str.strip also removes the information separators")
		Expect(fp("[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"\\u001f not json \\u00a0\"}]")).
			To(Equal(fp(`[{"type":"function_call","call_id":"c","name":"f","arguments":"not json"}]`)))
		By("empty or false tool_calls are no calls; a non-array truthy one is an error")
		Expect(fp(`[{"role":"assistant","content":"x","tool_calls":{}}]`)).To(Equal(fp(`[{"role":"assistant","content":"x"}]`)))
		_, err := lineage.AssistantFingerprint(items(`[{"role":"assistant","content":"x","tool_calls":{"a":1}}]`))
		Expect(err).To(MatchError(lineage.ErrUnfingerprintable))
	})

	It("ignores reasoning items and reasoning_content", func() {
		Expect(fp(`[{"type":"reasoning","summary":[{"type":"summary_text","text":"think"}]},{"role":"assistant","content":"5"}]`)).
			To(Equal(fp(`[{"role":"assistant","content":"5","reasoning_content":"other thoughts"}]`)))
	})

	It("treats an empty assistant turn as contributing nothing", func() {
		base := `{"role":"user","content":"q"},{"role":"assistant","content":"a"}`
		Expect(fp(`[` + base + `,{"role":"assistant","content":"","tool_calls":null}]`)).To(Equal(fp(`[` + base + `]`)))
	})

	It("hashes a non-text block by its type and canonical JSON", func() {
		img := fp(`[{"role":"assistant","content":[{"type":"image","source":{"b":1,"a":2}}]}]`)
		Expect(img).To(Equal(fp(`[{"role":"assistant","content":[{"source":{"a":2,"b":1},"type":"image"}]}]`)))
		Expect(img).NotTo(Equal(fp(`[{"role":"assistant","content":[{"type":"image","source":{"a":2,"b":3}}]}]`)))
	})

	DescribeTable("refuses unfingerprintable items",
		func(text string) {
			_, err := lineage.AssistantFingerprint(items(text))
			Expect(err).To(MatchError(lineage.ErrUnfingerprintable))
			_, err = lineage.ConversationDigest(items(text))
			Expect(err).To(MatchError(lineage.ErrUnfingerprintable))
		},
		Entry("non-object item", `["hello"]`),
		Entry("content block without type", `[{"role":"assistant","content":[{"foo":1}]}]`),
		Entry("non-object content element", `[{"role":"assistant","content":[5]}]`),
		Entry("content of another type", `[{"role":"assistant","content":{"text":"x"}}]`),
		Entry("arguments beyond 64-bit integers", `[{"type":"function_call","call_id":"c","name":"f","arguments":"{\"n\": 123456789012345678901234567890}"}]`),
		Entry("tool_calls element not an object", `[{"role":"assistant","content":"x","tool_calls":["oops"]}]`),
	)
})
