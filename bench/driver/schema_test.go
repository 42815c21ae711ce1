package driver_test

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/bench/driver"
)

const schemaFile = "../../docs/schema/bench-result.schema.json"

func compileSchema(ref string) *jsonschema.Schema {
	abs, err := filepath.Abs(schemaFile)
	Expect(err).NotTo(HaveOccurred())
	sch, err := jsonschema.NewCompiler().Compile(abs + ref)
	Expect(err).NotTo(HaveOccurred())
	return sch
}

func validate(sch *jsonschema.Schema, raw []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	Expect(err).NotTo(HaveOccurred())
	return sch.Validate(inst)
}

var _ = Describe("the published bench result schema", func() {
	var dir string

	BeforeEach(func(ctx SpecContext) {
		o := embeddedChat([]bench.Shape{{Arrival: bench.Poisson, Rate: 200, Concurrency: 8}, {Arrival: bench.Closed, Concurrency: 2}}, 12)
		o.Config.Chat.Extra = map[string]any{"ignore_eos": true, "temperature": 0.5}
		res, err := driver.Run(ctx, o)
		Expect(err).NotTo(HaveOccurred())
		dir = GinkgoT().TempDir()
		_, err = bench.WriteResult(dir, res)
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(time.Minute))

	It("accepts the result and every sample a run writes", func() {
		raw, err := os.ReadFile(filepath.Join(dir, "result.json"))
		Expect(err).NotTo(HaveOccurred())
		Expect(validate(compileSchema(""), raw)).To(Succeed())
		f, err := os.Open(filepath.Join(dir, bench.SamplesFileName))
		Expect(err).NotTo(HaveOccurred())
		defer f.Close()
		sample := compileSchema("#/$defs/sample")
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<24)
		n := 0
		for sc.Scan() {
			Expect(validate(sample, sc.Bytes())).To(Succeed(), "sample %d", n)
			n++
		}
		Expect(n).To(Equal(48))
	})

	DescribeTable("rejects results that break the format",
		func(from, to string) {
			raw, err := os.ReadFile(filepath.Join(dir, "result.json"))
			Expect(err).NotTo(HaveOccurred())
			Expect(bytes.Contains(raw, []byte(from))).To(BeTrue(), "fixture lacks %s", from)
			Expect(validate(compileSchema(""), bytes.Replace(raw, []byte(from), []byte(to), 1))).NotTo(Succeed())
		},
		Entry("another schema version", `"schema": "capbench.bench/v1"`, `"schema": "capbench.bench/v2"`),
		Entry("an unknown path", `"path": "direct"`, `"path": "sideways"`),
		Entry("a field the format does not have", `"interrupted": false`, `"interrupted": false, "bogus": 1`),
		Entry("an unknown arrival", `"arrival": "poisson"`, `"arrival": "bursty"`),
	)
})
