package store_test

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/capbench/capbench/capture/store"
)

// FuzzParseState: any input either fails cleanly or round-trips to a fixed
// point (encoding what was parsed, then parsing again, changes nothing).
func FuzzParseState(f *testing.F) {
	f.Add([]byte(`{"entry_digests":{"c1":"ab"},"frozen":false,"incomplete":false,"indexed_size":594,"retired":false,"snapshot_id":"","version":1}`))
	f.Add([]byte(`{"frozen":true,"version":3,"refusals":[{"code":"x","created_at":1.5}]}`))
	f.Add([]byte(`{"entry_digests":[],"indexed_size":"7"}`))
	f.Add([]byte(`[1]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := store.ParseState(data)
		if err != nil {
			return
		}
		once, err := st.MarshalCanonical()
		if err != nil {
			return // e.g. an unknown key holding a number beyond 64 bits
		}
		again, err := store.ParseState(once)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", once, err)
		}
		twice, err := again.MarshalCanonical()
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("not a fixed point:\n%s\n%s (%v)", once, twice, err)
		}
	})
}

// FuzzValidateRolloutID: an accepted id always names a file directly inside
// the store directory.
func FuzzValidateRolloutID(f *testing.F) {
	for _, s := range []string{"r-1", "..", ".x", "a/b", "", "a\x00b", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if store.ValidateRolloutID(id) != nil {
			return
		}
		dir := filepath.Join("base", "store")
		p := filepath.Join(dir, id+".tokens.jsonl")
		if filepath.Dir(p) != dir || strings.ContainsAny(id, "/\\\x00") {
			t.Fatalf("id %q escapes: %s", id, p)
		}
	})
}
