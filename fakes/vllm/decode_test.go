package vllm_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/fakes/vllm"
)

var _ = Describe("the fast chat request decoder", func() {
	DescribeTable("decodes what clients send as encoding/json does, and hands anything unusual to encoding/json",
		func(body string, fast bool) {
			fastOK, jsonOK, diff := vllm.DecodeChatBoth([]byte(body))
			Expect(fastOK).To(Equal(fast))
			Expect(diff).To(BeEmpty())
			if fastOK {
				Expect(jsonOK).To(BeTrue())
			}
		},
		Entry("a plain chat call", chatDecodeSeeds[0], true),
		Entry("an agent call with tools, streaming and sampling fields", chatDecodeSeeds[1], true),
		Entry("null fields and null list elements", `{"max_tokens":null,"n":null,"stream":null,"model":null,"tools":[null],"messages":[null,{"role":null}]}`, true),
		Entry("unknown fields of any shape", `{"messages":[],"extra_body":{"a":[1,{"b":"\u00e9"}]},"user":"u","ignore_eos":true}`, true),
		Entry("a key that matches a field only case-insensitively", `{"Model":"m","messages":[]}`, false),
		Entry("an escaped key", `{"mod\u0065l":"m","messages":[]}`, false),
		Entry("a repeated key", `{"model":"a","model":"b"}`, false),
		Entry("a repeated message key", `{"messages":[{"content":"a","content":"b"}]}`, false),
		Entry("an integer field with a fraction", `{"max_tokens":1.0}`, false),
		Entry("an integer field out of range", `{"max_tokens":99999999999999999999}`, false),
		Entry("a number where a bool belongs", `{"stream":1}`, false),
		Entry("a string where an integer belongs", `{"max_tokens":"16"}`, false),
		Entry("a message that is not an object", `{"messages":["hi"]}`, false),
		Entry("trailing data", `{"messages":[]} x`, false),
		Entry("a syntax error deep inside an unknown field", `{"messages":[],"x":[1,2,}`, false),
		Entry("a top-level null", `null`, false),
		Entry("invalid UTF-8 in the model name", "{\"model\":\"\xff\"}", true),
		Entry("an escaped model name", `{"model":"a\"b"}`, true),
	)
})
