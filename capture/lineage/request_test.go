package lineage_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/lineage"
)

func body(text string) map[string]any {
	GinkgoHelper()
	list := items(`[` + text + `]`)
	return list[0].(map[string]any)
}

var _ = Describe("RequestItems", func() {
	It("returns chat messages, skipping nulls", func() {
		got, err := lineage.RequestItems(lineage.DialectChat, body(`{"model":"m","messages":[{"role":"user","content":"hi"},null]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(Equal([]any{map[string]any{"role": "user", "content": "hi"}}))
	})

	It("returns Responses input items, and none for a string input", func() {
		got, err := lineage.RequestItems(lineage.DialectResponses, body(`{"input":[{"type":"message","role":"user","content":"hi"}]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveLen(1))
		got, err = lineage.RequestItems(lineage.DialectResponses, body(`{"input":"hi"}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(BeEmpty())
	})

	It("prepends the envelope with Python json.dumps bytes", func() {
		got, err := lineage.RequestItems(lineage.DialectResponses, body(`{"instructions":"Be brief é","tools":[{"type":"function","name":"ls","parameters":{"b":1e16,"a":[0.00001,1.0,-0,"\u2028\n🙂"],"c":null,"d":true}}],"input":[{"role":"user","content":"hi"}]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveLen(2))
		Expect(got[0]).To(Equal(map[string]any{
			"role":    "_ng_request_envelope",
			"content": `{"instructions": "Be brief \u00e9", "tools": [{"name": "ls", "parameters": {"a": [1e-05, 1.0, 0, "\u2028\n\ud83d\ude42"], "b": 1e+16, "c": null, "d": true}, "type": "function"}]}`,
		}))
		Expect(got[1]).To(Equal(map[string]any{"role": "user", "content": "hi"}))
	})

	It("writes both envelope keys even when only one is set", func() {
		got, err := lineage.RequestItems(lineage.DialectChat, body(`{"tools":[{"type":"function","function":{"name":"f"}}],"messages":[]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveLen(1))
		Expect(got[0].(map[string]any)["content"]).To(Equal(`{"instructions": null, "tools": [{"function": {"name": "f"}, "type": "function"}]}`))
	})

	It("adds no envelope for empty instructions and tools", func() {
		got, err := lineage.RequestItems(lineage.DialectResponses, body(`{"instructions":"","tools":[],"input":[{"role":"user","content":"hi"}]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(got).To(HaveLen(1))
	})

	It("uses an Anthropic system prompt as the envelope's instructions", func() {
		got, err := lineage.RequestItems(lineage.DialectMessages, body(`{"system":"Be brief","messages":[{"role":"user","content":"hi"}]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(got[0].(map[string]any)["content"]).To(Equal(`{"instructions": "Be brief", "tools": null}`))
		got, err = lineage.RequestItems(lineage.DialectMessages, body(`{"system":[{"type":"text","text":"Be brief"}],"messages":[]}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(got[0].(map[string]any)["content"]).To(Equal(`{"instructions": [{"text": "Be brief", "type": "text"}], "tools": null}`))
	})

	It("changes the context digest, not the fingerprint, when tools change", func() {
		a, err := lineage.RequestItems(lineage.DialectChat, body(`{"tools":[{"name":"a"}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"x"}]}`))
		Expect(err).NotTo(HaveOccurred())
		b, err := lineage.RequestItems(lineage.DialectChat, body(`{"tools":[{"name":"b"}],"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"x"}]}`))
		Expect(err).NotTo(HaveOccurred())
		fa, _ := lineage.AssistantFingerprint(a)
		fb, _ := lineage.AssistantFingerprint(b)
		Expect(fa).To(Equal(fb))
		da, _ := lineage.ConversationDigest(a)
		db, _ := lineage.ConversationDigest(b)
		Expect(da).NotTo(Equal(db))
	})

	DescribeTable("refuses malformed bodies",
		func(d lineage.Dialect, text string) {
			_, err := lineage.RequestItems(d, body(text))
			Expect(err).To(MatchError(lineage.ErrRequest))
		},
		Entry("unknown dialect", lineage.Dialect("completions"), `{"messages":[]}`),
		Entry("messages not an array", lineage.DialectChat, `{"messages":{"role":"user"}}`),
		Entry("chat messages as a string", lineage.DialectChat, `{"messages":"hi"}`),
		Entry("non-object item", lineage.DialectResponses, `{"input":["hi"]}`),
	)
})
