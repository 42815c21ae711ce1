package lineage_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/lineage"
)

var _ = Describe("PythonDumpsInOrder", func() {
	// Expected values are what CPython 3.12 prints for
	// json.dumps(json.loads(raw), ensure_ascii=False).
	DescribeTable("re-encodes as a Python server would",
		func(raw, want string) {
			got, err := lineage.PythonDumpsInOrder([]byte(raw))
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(want))
		},
		Entry("schema order is kept, not sorted", `{"file_path":"/a.txt","content":"hi"}`, `{"file_path": "/a.txt", "content": "hi"}`),
		Entry("Edit's three keys", `{"file_path":"/a","old_string":"x","new_string":"y"}`, `{"file_path": "/a", "old_string": "x", "new_string": "y"}`),
		Entry("integers exact, floats as Python prints them", `{"offset":10,"limit":1e2,"t":1.50,"big":123456789012345678901}`,
			`{"offset": 10, "limit": 100.0, "t": 1.5, "big": 123456789012345678901}`),
		Entry("nested objects and arrays keep order", `{"z":{"b":1,"a":[{"y":true,"x":null}]},"a":[]}`, `{"z": {"b": 1, "a": [{"y": true, "x": null}]}, "a": []}`),
		Entry("non-ASCII stays raw, controls are escaped", `{"text":"héllo ✓ \u0001\n\"q\" \\ \u007f"}`, "{\"text\": \"héllo ✓ \\u0001\\n\\\"q\\\" \\\\ \x7f\"}"),
		Entry("escaped non-ASCII is decoded", `{"k":"\u00e9\ud83d\ude00"}`, `{"k": "é😀"}`),
		Entry("whitespace in the input is irrelevant", " {\n \"a\" : 1 ,\"b\":[ 1 , 2 ] }\n", `{"a": 1, "b": [1, 2]}`),
		Entry("empty object", `{}`, `{}`),
	)

	It("rejects what is not one JSON value", func() {
		for _, bad := range []string{`{"a":`, `{"a":1} {}`, ``, `{"a" 1}`} {
			_, err := lineage.PythonDumpsInOrder([]byte(bad))
			Expect(err).To(HaveOccurred(), bad)
		}
	})
})
