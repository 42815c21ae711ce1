package lineage_test

import (
	"encoding/json"
	"io"
	"strings"
)

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

// decodeItems is items for package-level fixtures, where no Gomega handler
// exists yet; a malformed literal yields nil and fails the specs using it.
func decodeItems(text string) []any {
	var out []any
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil
	}
	return out
}

func bytesReader(b []byte) io.Reader { return strings.NewReader(string(b)) }
