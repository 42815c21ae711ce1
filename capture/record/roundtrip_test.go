package record_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

// oddLine is a fixture line the fixture README documents as deliberately
// unreadable, with the outcome a reader must give.
type oddLine struct {
	fileSuffix string
	line       int
	want       error // sentinel the ParseLine error must wrap
	syntax     bool  // malformed JSON: no sentinel beyond ErrInvalid, and UnmarshalJSON fails too
}

// documentedOddLines follows gym-store/README.md: 08 torn tail, 10 corrupt
// line, 14 NaN log-prob written as null, 15 a line of a foreign schema.
var documentedOddLines = []oddLine{
	{"docs-extras/08-torn-trailing-line/files-before-last-freeze/task3-0.tokens.jsonl", 3, record.ErrInvalid, true},
	{"main/08-torn-trailing-line/files-before-last-freeze/task3-0.tokens.jsonl", 3, record.ErrInvalid, true},
	{"docs-extras/10-corrupt-line-then-content/files/task3-0.tokens.jsonl", 2, record.ErrInvalid, true},
	{"main/10-corrupt-line-then-content/files/task3-0.tokens.jsonl", 2, record.ErrInvalid, true},
	{"docs-extras/14-nan-logprob-unreadable/files/task3-0.tokens.jsonl", 1, record.ErrInvalid, true},
	{"main/14-nan-logprob-unreadable/files/task3-0.tokens.jsonl", 1, record.ErrInvalid, true},
	{"docs-extras/15-foreign-schema-line/files/task3-0.tokens.jsonl", 2, record.ErrSchemaTooOld, false},
	{"docs-extras/15-foreign-schema-line/files-before-last-freeze/task3-0.tokens.jsonl", 2, record.ErrSchemaTooOld, false},
}

// foreignToMain are lines under main/ that carry schema 5 (the 15 case
// reversed): the target reader accepts them.
var foreignToMain = []oddLine{
	{"main/15-foreign-schema-line/files/task3-0.tokens.jsonl", 2, nil, false},
	{"main/15-foreign-schema-line/files-before-last-freeze/task3-0.tokens.jsonl", 2, nil, false},
}

func lookupOdd(list []oddLine, l fixtureLine) (oddLine, bool) {
	for _, o := range list {
		if strings.HasSuffix(l.file, o.fileSuffix) && o.line == l.num {
			return o, true
		}
	}
	return oddLine{}, false
}

var _ = Describe("re-encoding Gym-written lines", func() {
	var root string
	BeforeEach(func() {
		root = fixturesDir()
		if root == "" {
			Skip("shared/fixtures not found next to the repository root")
		}
	})

	It("reproduces every readable gym-store and gym-consumer line byte for byte", func() {
		lines, err := jsonlLines(root,
			"gym-store/*/*/files*/*.jsonl",
			"gym-consumer/*/capture*/*.jsonl",
			"gym-consumer/*/snapshot.jsonl")
		Expect(err).NotTo(HaveOccurred())
		Expect(len(lines)).To(BeNumerically(">", 200))

		seenOdd := map[string]bool{}
		roundTripped := 0
		for _, l := range lines {
			where := fmt.Sprintf("%s:%d", l.file, l.num)
			odd, isOdd := lookupOdd(documentedOddLines, l)
			_, isForeign := lookupOdd(foreignToMain, l)
			schemaOne := (strings.HasPrefix(l.file, "gym-store/main/") && !isForeign) ||
				strings.Contains(l.file, "/capture-main/")

			e, err := record.ParseLine(l.data)
			switch {
			case isOdd:
				seenOdd[where] = true
				Expect(err).To(MatchError(odd.want), where)
				Expect(err).To(MatchError(record.ErrInvalid), where)
				Expect(e).To(BeNil(), where)
			case schemaOne:
				// The L1 writer's schema 1 is below this reader's floor.
				Expect(err).To(MatchError(record.ErrSchemaTooOld), where)
			default:
				Expect(err).NotTo(HaveOccurred(), where)
				out, err := e.MarshalCanonical()
				Expect(err).NotTo(HaveOccurred(), where)
				Expect(string(out)).To(Equal(string(l.data)), where)
				Expect(record.EntryDigest(out)).To(Equal(record.EntryDigest(bytes.TrimSpace(append(l.data, '\n')))))
				roundTripped++
			}

			// Lines that are valid JSON re-encode exactly even when the
			// reader's window refuses them: decoding does not validate.
			if !isOdd || !odd.syntax {
				var raw record.Entry
				Expect(raw.UnmarshalJSON(l.data)).To(Succeed(), where)
				out, err := raw.MarshalCanonical()
				Expect(err).NotTo(HaveOccurred(), where)
				Expect(string(out)).To(Equal(string(l.data)), where)
			}
		}
		Expect(seenOdd).To(HaveLen(len(documentedOddLines)), "every documented odd line was found")
		Expect(roundTripped).To(BeNumerically(">", 150))
	})

	It("writes every declared field once a parsed line is marked for a full rewrite", func() {
		lines, err := jsonlLines(root, "gym-store/docs-extras/01-clean-3-call/files/*.jsonl")
		Expect(err).NotTo(HaveOccurred())
		Expect(lines).NotTo(BeEmpty())
		e, err := record.ParseLine(lines[0].data)
		Expect(err).NotTo(HaveOccurred())
		Expect(e.AbsentFields()).To(Equal([]string{"response_id"}), "the L2 writer had no response_id")
		e.WriteAllFields()
		out, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(out)).To(ContainSubstring(`"response_id":null,"rollout_id"`))
	})

	It("writes a field that was absent once it holds a value", func() {
		e, err := record.ParseLine([]byte(`{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1],"generation_token_ids":[],"generation_log_probs":[]}`))
		Expect(err).NotTo(HaveOccurred())
		out, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(out)).To(Equal(`{"generation_log_probs":[],"generation_token_ids":[],"model_call_id":"c","prompt_token_ids":[1],"rollout_id":"r"}`))
		id := "resp_1"
		e.ResponseID = &id
		e.SchemaVersion = 4
		out, err = e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		Expect(string(out)).To(Equal(`{"generation_log_probs":[],"generation_token_ids":[],"model_call_id":"c","prompt_token_ids":[1],"response_id":"resp_1","rollout_id":"r","schema_version":4}`))
	})
})

var _ = Describe("decoding", func() {
	const minimal = `{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1,2],"generation_token_ids":[3],"generation_log_probs":[-0.5]}`

	It("applies the documented defaults to absent fields", func() {
		e, err := record.ParseLine([]byte(minimal))
		Expect(err).NotTo(HaveOccurred())
		Expect(e.SchemaVersion).To(Equal(record.SchemaVersion))
		Expect(e.Model).To(BeEmpty())
		Expect(e.OutputItems).To(BeEmpty())
		Expect(e.OutputItems).NotTo(BeNil())
		Expect(e.RoutedExperts).To(BeNil())
		Expect(e.TokenItemIndex).To(BeNil())
		Expect(e.ParentResolution).To(BeNil())
		Expect(e.FingerprintVersion).To(BeNil())
		Expect(e.CreatedAt).To(BeZero())
		Expect(e.PromptIsDelta).To(BeFalse())
	})

	It("reads integral floats and numeric strings as integers, as Python does", func() {
		e, err := record.ParseLine([]byte(`{"schema_version":"4","rollout_id":"r","model_call_id":"c",` +
			`"prompt_token_ids":[1.0," 2 ",3e0],"generation_token_ids":[4],"generation_log_probs":["-0.25"],` +
			`"cum_len":5.0,"continuation_context_len":"2","created_at":"1.5","prefix_requested":1,"prefix_supplied":"no"}`))
		Expect(err).NotTo(HaveOccurred())
		Expect(e.SchemaVersion).To(Equal(4))
		Expect(e.PromptTokenIDs).To(Equal([]int{1, 2, 3}))
		Expect(e.GenerationLogProbs).To(Equal([]float64{-0.25}))
		Expect(*e.CumLen).To(Equal(5))
		Expect(e.ContinuationContextLen).To(Equal(2))
		Expect(e.CreatedAt).To(Equal(1.5))
		Expect(e.PrefixRequested).To(BeTrue())
		Expect(e.PrefixSupplied).To(BeFalse())
	})

	It("keeps unknown keys, sorted in among the declared ones on re-encoding", func() {
		line := `{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1],"generation_token_ids":[],` +
			`"generation_log_probs":[],"zz_extra":{"b":1, "a":[1.50,"x"]},"aa_extra":null,"n":1e400}`
		e, err := record.ParseLine([]byte(line))
		Expect(err).NotTo(HaveOccurred())
		Expect(e.Extra).To(HaveKey("zz_extra"))
		Expect(e.Extra).To(HaveKey("aa_extra"))
		e.WriteAllFields()
		out, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		s := string(out)
		Expect(s).To(HavePrefix(`{"aa_extra":null,"continuation_context_digest":""`))
		Expect(s).To(ContainSubstring(`"model_call_id":"c","n":null,"output_items":[]`))
		Expect(s).To(HaveSuffix(`"token_item_index":null,"zz_extra":{"a":[1.5,"x"],"b":1}}`))
	})

	DescribeTable("refuses malformed input without panicking",
		func(line string, sentinel error) {
			e, err := record.ParseLine([]byte(line))
			Expect(err).To(HaveOccurred())
			Expect(err).To(MatchError(sentinel))
			Expect(e).To(BeNil())
		},
		Entry("empty", ``, record.ErrInvalid),
		Entry("not an object", `[1,2]`, record.ErrInvalid),
		Entry("trailing data", minimal+` {}`, record.ErrInvalid),
		Entry("trailing NUL byte", minimal+"\x00", record.ErrInvalid),
		Entry("missing required fields", `{"rollout_id":"r"}`, record.ErrInvalid),
		Entry("token id not an integer", `{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1.5],"generation_token_ids":[],"generation_log_probs":[]}`, record.ErrInvalid),
		Entry("token id a boolean", `{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[true],"generation_token_ids":[],"generation_log_probs":[]}`, record.ErrInvalid),
		Entry("log-prob null (NaN written by Python)", `{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[null]}`, record.ErrInvalid),
		Entry("rollout id not a string", `{"rollout_id":5,"model_call_id":"c","prompt_token_ids":[1],"generation_token_ids":[],"generation_log_probs":[]}`, record.ErrInvalid),
		Entry("unknown parent_resolution", `{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1],"generation_token_ids":[],"generation_log_probs":[],"parent_resolution":"maybe"}`, record.ErrInvalid),
		Entry("output item not an object", `{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1],"generation_token_ids":[],"generation_log_probs":[],"output_items":[1]}`, record.ErrInvalid),
		Entry("leading zero", `{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[01],"generation_token_ids":[],"generation_log_probs":[]}`, record.ErrInvalid),
		Entry("raw control character", "{\"rollout_id\":\"r\x01\",\"model_call_id\":\"c\",\"prompt_token_ids\":[1],\"generation_token_ids\":[],\"generation_log_probs\":[]}", record.ErrInvalid),
		Entry("invalid UTF-8", "{\"rollout_id\":\"r\xff\",\"model_call_id\":\"c\",\"prompt_token_ids\":[1],\"generation_token_ids\":[],\"generation_log_probs\":[]}", record.ErrInvalid),
		Entry("truncated", minimal[:60], record.ErrInvalid),
		Entry("schema too new", `{"schema_version":6,"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1],"generation_token_ids":[],"generation_log_probs":[]}`, record.ErrSchemaTooNew),
	)

	It("leaves the target untouched when UnmarshalJSON fails", func() {
		e, err := record.ParseLine([]byte(minimal))
		Expect(err).NotTo(HaveOccurred())
		Expect(e.UnmarshalJSON([]byte(`{"rollout_id":"other","prompt_token_ids":[`))).NotTo(Succeed())
		Expect(e.RolloutID).To(Equal("r"))
		Expect(e.PromptTokenIDs).To(Equal([]int{1, 2}))
	})

	It("is what encoding/json uses", func() {
		e, err := record.ParseLine([]byte(minimal))
		Expect(err).NotTo(HaveOccurred())
		e.WriteAllFields()
		viaJSON, err := json.Marshal(e)
		Expect(err).NotTo(HaveOccurred())
		canonical, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		Expect(viaJSON).To(Equal(canonical))
		var back record.Entry
		Expect(json.Unmarshal(viaJSON, &back)).To(Succeed())
		Expect(back.PromptTokenIDs).To(Equal([]int{1, 2}))
		Expect(back.Validate()).To(Succeed())
	})
})
