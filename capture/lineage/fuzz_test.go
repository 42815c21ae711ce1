package lineage_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/capbench/capbench/capture/lineage"
)

// FuzzFingerprints feeds arbitrary JSON item lists to both hashes: they must
// never panic, must fail only with ErrUnfingerprintable, and must return
// well-formed hex otherwise.
func FuzzFingerprints(f *testing.F) {
	for _, seed := range []string{
		chatToolExchange, anthropicToolExchange, responsesToolExchange,
		`[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Done."}]}]`,
		`[{"role":"system","content":"x"},{"role":"user","content":[{"type":"image","source":{"a":1}}]}]`,
		`[{"type":"function_call","namespace":"fs","name":null,"call_id":"c","arguments":"{\"n\": NaN}"}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var list []any
		dec := json.NewDecoder(bytesReader(data))
		dec.UseNumber()
		if dec.Decode(&list) != nil {
			return
		}
		fp, err := lineage.AssistantFingerprint(list)
		if err != nil && !errors.Is(err, lineage.ErrUnfingerprintable) {
			t.Fatalf("fingerprint error not wrapped: %v", err)
		}
		if err == nil && fp != "" && len(fp) != 64 {
			t.Fatalf("bad fingerprint %q", fp)
		}
		d, err := lineage.ConversationDigest(list)
		if err != nil && !errors.Is(err, lineage.ErrUnfingerprintable) {
			t.Fatalf("digest error not wrapped: %v", err)
		}
		if err == nil && len(d) != 64 {
			t.Fatalf("bad digest %q", d)
		}
	})
}
