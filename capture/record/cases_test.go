package record_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

// storeCase is the part of a gym-store case.json this package needs.
type storeCase struct {
	Operations []struct {
		Op   string `json:"op"`
		Args struct {
			Entry json.RawMessage `json:"entry"`
		} `json:"args"`
		Error json.RawMessage `json:"error"`
	} `json:"operations"`
}

var _ = Describe("records handed to Gym's put", func() {
	It("encode to exactly the lines Gym wrote for them", func() {
		root := fixturesDir()
		if root == "" {
			Skip("shared/fixtures not found next to the repository root")
		}
		cases, err := filepath.Glob(filepath.Join(root, "gym-store", "*", "*", "case.json"))
		Expect(err).NotTo(HaveOccurred())
		Expect(cases).NotTo(BeEmpty())
		checked := 0
		for _, path := range cases {
			data, err := os.ReadFile(path)
			Expect(err).NotTo(HaveOccurred())
			if strings.Contains(path, "14-nan-logprob-unreadable") {
				// Python's json.dumps wrote the NaN log-prob as a bare NaN
				// literal, which is not JSON: a Go reader must refuse it.
				Expect(bytes.Contains(data, []byte("NaN"))).To(BeTrue())
				continue
			}
			var sc storeCase
			Expect(json.Unmarshal(data, &sc)).To(Succeed(), path)
			lines, err := jsonlLines(filepath.Dir(path), "files*/*.jsonl")
			Expect(err).NotTo(HaveOccurred())
			written := map[string]bool{}
			callIDs := map[string]bool{}
			for _, l := range lines {
				written[string(l.data)] = true
				var e record.Entry
				if e.UnmarshalJSON(l.data) == nil {
					callIDs[e.ModelCallID] = true
				}
			}
			for _, op := range sc.Operations {
				if op.Op != "put" || op.Args.Entry == nil || op.Error != nil {
					continue // refused puts wrote nothing
				}
				var e record.Entry
				Expect(e.UnmarshalJSON(op.Args.Entry)).To(Succeed(), path)
				if !callIDs[e.ModelCallID] {
					continue // a later drop, delete or sweep removed the file
				}
				out, err := e.MarshalCanonical()
				Expect(err).NotTo(HaveOccurred(), path)
				Expect(written).To(HaveKey(string(out)), "%s: put of %s", path, e.ModelCallID)
				checked++
			}
		}
		Expect(checked).To(BeNumerically(">=", 50))
	})

	It("refuses the NaN literal Python's json module writes", func() {
		var e record.Entry
		err := e.UnmarshalJSON([]byte(`{"rollout_id":"r","model_call_id":"c","prompt_token_ids":[1],"generation_token_ids":[2],"generation_log_probs":[NaN]}`))
		Expect(err).To(MatchError(record.ErrInvalid))
	})
})
