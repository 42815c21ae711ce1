package vllm

import (
	"fmt"
	"strings"
)

// CheckFillerIDs draws unscripted filler for seeds seeds on a template
// variant and reports the first seed whose ids are not the tokenizer's
// encoding of its text, or whose text is not what the template renders.
func CheckFillerIDs(variant string, seeds int) error {
	tok, tmpl, err := newTextModel(variant)
	if err != nil {
		return err
	}
	e := newEngine(tok, tmpl, Lengths{Mean: 48, StdDev: 24, Min: 1})
	for i := range uint64(seeds) {
		seed, maxTokens := i*0x9e3779b97f4a7c15, 1+int(i%97)
		text, ids := e.plausible(seed, maxTokens)
		if content, ok := strings.CutSuffix(text, e.eosText); !ok && !tmpl.thinking() {
			return fmt.Errorf("seed %d: %q does not end with EOS", i, text)
		} else if want := tmpl.renderGeneration(content, "", nil); !tmpl.thinking() && text != want {
			return fmt.Errorf("seed %d: text %q, the template renders %q", i, text, want)
		}
		if ids == nil {
			if !tmpl.thinking() {
				return fmt.Errorf("seed %d: no ids on the plain template", i)
			}
			continue
		}
		if want := tok.Encode(text); fmt.Sprint(ids) != fmt.Sprint(want) {
			return fmt.Errorf("seed %d: ids %v, Encode %v (%q)", i, ids, want, text)
		}
	}
	return nil
}
