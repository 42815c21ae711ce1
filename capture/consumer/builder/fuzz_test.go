package builder_test

import (
	"errors"
	"strconv"
	"testing"

	"github.com/capbench/capbench/capture/consumer/builder"
	"github.com/capbench/capbench/capture/record"
)

// fuzzEntries decodes bytes into a small, often self-consistent snapshot:
// prompts are prefixes of one shared token stream (so parents and children
// really extend each other), with ids from a tiny alphabet (so duplicates,
// missing parents and cycles happen), and every optional field sometimes
// absent or wrong.
func fuzzEntries(data []byte) ([]*record.Entry, string) {
	next := func() int {
		if len(data) == 0 {
			return 0
		}
		b := int(data[0])
		data = data[1:]
		return b
	}
	stream := make([]int, 64)
	for i := range stream {
		stream[i] = i % 7
	}
	n := next() % 12
	var entries []*record.Entry
	for i := 0; i < n; i++ {
		flags := next()
		id := "c" + strconv.Itoa(next()%6)
		start := 0
		if flags&0x80 != 0 {
			start = next() % 4 // a different stream offset: a new root
		}
		pLen := next() % 24
		gLen := next() % 4
		prompt := stream[start : start+pLen]
		gen := stream[start+pLen : start+pLen+gLen]
		if flags&0x40 != 0 && gLen > 0 {
			gen = append([]int{}, gen...)
			gen[0] = 100 + next()%3 // a different generation: a retry sibling
		}
		lp := make([]float64, len(gen))
		if flags&0x20 != 0 && len(lp) > 0 {
			lp = lp[1:]
		}
		e := &record.Entry{SchemaVersion: record.SchemaVersion, RolloutID: "r", ModelCallID: id,
			PromptTokenIDs: prompt, GenerationTokenIDs: gen, GenerationLogProbs: lp, CreatedAt: float64(next() % 5)}
		cum := append(append([]int{}, prompt...), gen...)
		if flags&0x10 == 0 {
			d, _ := record.TokenDigest(cum)
			l := len(cum)
			if flags&0x08 != 0 {
				l++ // a wrong stamped length
			}
			e.CumLen, e.Digest = &l, &d
		}
		switch flags & 0x07 {
		case 0:
			r := record.ResolutionRoot
			e.ParentResolution = &r
		case 1:
			r := record.ResolutionUnresolved
			e.ParentResolution = &r
		case 2, 3, 4:
			r := record.ResolutionResolved
			e.ParentResolution = &r
			p := "c" + strconv.Itoa(next()%7)
			e.ParentCallID = &p
			if flags&0x07 == 4 && pLen > 2 {
				e.PromptIsDelta = true
				e.PromptTokenIDs = prompt[pLen-2:]
			}
		case 5:
			p := "c" + strconv.Itoa(next()%7)
			e.ParentCallID = &p
		case 6:
			r := record.ResolutionResolved
			e.ParentResolution = &r
		}
		if k := next() % 4; k > 0 {
			e.OutputItems = make([]record.Item, k)
			for j := range e.OutputItems {
				e.OutputItems[j] = record.Item{"type": "message", "content": "x"}
			}
			idx := next()%6 - 1
			if idx >= 0 {
				e.TokenItemIndex = &idx
			}
		}
		entries = append(entries, e)
	}
	terminal := ""
	if t := next(); t%3 != 0 {
		terminal = "c" + strconv.Itoa(t%7)
	}
	if n > 0 && len(entries) > 0 && next()%5 == 0 {
		entries = append(entries, nil)
	}
	return entries, terminal
}

func FuzzBuild(f *testing.F) {
	f.Add([]byte{3, 0, 1, 4, 2, 0, 0, 2, 1, 2, 8, 2, 0, 1, 0, 2, 2, 12, 3, 0, 1, 0, 1})
	f.Add([]byte{5, 0x40, 1, 4, 2, 0, 1, 0x42, 2, 8, 2, 1, 1, 0, 0x42, 3, 8, 2, 1, 1, 0, 0x04, 4, 12, 2, 3, 0, 0, 5})
	f.Add([]byte{2, 0x93, 1, 2, 0, 2, 1, 0x20, 0x0c, 2, 0, 2, 2, 9, 1, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, terminal := fuzzEntries(data)
		out, err := builder.PrefixMergingBuild(entries, terminal)
		if err != nil {
			if !errors.Is(err, builder.ErrBuild) {
				t.Fatalf("unexpected error type: %v", err)
			}
			return
		}
		if out.Notes.Chains != len(out.Chains) {
			t.Fatalf("notes say %d chains, built %d", out.Notes.Chains, len(out.Chains))
		}
		if out.Notes.TerminalChain == builder.TerminalDelivered {
			main := out.Main()
			if main == nil || main.ID != "main" || main.Links[len(main.Links)-1].Entry.ModelCallID != terminal {
				t.Fatalf("delivered chain does not end at the terminal %q", terminal)
			}
		}
		if f := out.Notes.DeliveredFraction; f < 0 || f > 1 {
			t.Fatalf("delivered fraction %v", f)
		}
		for _, c := range out.Chains {
			if err := c.Validate(); err != nil {
				if !errors.Is(err, builder.ErrBuild) {
					t.Fatalf("unexpected validation error type: %v", err)
				}
				return
			}
		}
		resp, err := builder.Project("r", out, "m")
		if err != nil {
			if !errors.Is(err, builder.ErrBuild) {
				t.Fatalf("unexpected projection error type: %v", err)
			}
			return
		}
		if err := builder.CheckContiguity(resp); err != nil && !errors.Is(err, builder.ErrBuild) {
			t.Fatalf("unexpected contiguity error type: %v", err)
		}
	})
}
