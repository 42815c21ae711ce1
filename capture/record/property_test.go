package record_test

import (
	"encoding/json"
	"math"
	"math/rand"
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
)

// randomEntries builds records with awkward but legal content: floats
// across the whole range, strings with control and non-ASCII characters,
// nested items with exact integers, and extra keys.
type entryGen struct{ r *rand.Rand }

func (g entryGen) float() float64 {
	switch g.r.Intn(6) {
	case 0:
		return -g.r.ExpFloat64()
	case 1:
		return math.Float64frombits(g.r.Uint64() &^ (0x7ff << 52)) // subnormal or zero
	case 2:
		return float64(float32(-g.r.Float64() * 20))
	case 3:
		return -math.Pow(10, float64(g.r.Intn(40)-20)) * (1 + g.r.Float64())
	case 4:
		return float64(-g.r.Intn(1 << 20))
	default:
		f := math.Float64frombits(g.r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0
		}
		return f
	}
}

func (g entryGen) str() string {
	alphabet := []string{"a", "Z", " ", "\"", "\\", "/", "\n", "\t", "\x00", "\x1f", "\x7f", "é", "漢", "🙂", "\u2028", "\u2029", "<", "&"}
	n := g.r.Intn(12)
	s := ""
	for range n {
		s += alphabet[g.r.Intn(len(alphabet))]
	}
	return s
}

func (g entryGen) value(depth int) any {
	switch k := g.r.Intn(8); {
	case k == 0:
		return nil
	case k == 1:
		return g.r.Intn(2) == 0
	case k == 2:
		return g.str()
	case k == 3:
		return json.Number(strconv.FormatInt(g.r.Int63()-g.r.Int63(), 10))
	case k == 4:
		return json.Number(strconv.FormatFloat(g.float(), 'g', -1, 64))
	case k == 5 && depth < 3:
		var list []any
		for range g.r.Intn(4) {
			list = append(list, g.value(depth+1))
		}
		if list == nil {
			list = []any{}
		}
		return list
	case depth < 3:
		m := map[string]any{}
		for range g.r.Intn(4) {
			m[g.str()] = g.value(depth + 1)
		}
		return m
	default:
		return g.str()
	}
}

func (g entryGen) entry() *record.Entry {
	e := &record.Entry{
		SchemaVersion: record.MinSchemaVersion + g.r.Intn(3), RolloutID: g.str(), ModelCallID: g.str(), Model: g.str(),
		CreatedAt: math.Abs(g.float()), ContinuationFingerprint: g.str(), ContinuationContextLen: g.r.Intn(100),
	}
	for range g.r.Intn(50) {
		e.PromptTokenIDs = append(e.PromptTokenIDs, g.r.Intn(1<<31))
	}
	for range g.r.Intn(20) {
		e.GenerationTokenIDs = append(e.GenerationTokenIDs, g.r.Intn(200000))
		e.GenerationLogProbs = append(e.GenerationLogProbs, g.float())
	}
	if e.PromptTokenIDs == nil {
		e.PromptTokenIDs = []int{}
	}
	if e.GenerationTokenIDs == nil {
		e.GenerationTokenIDs, e.GenerationLogProbs = []int{}, []float64{}
	}
	for range g.r.Intn(3) {
		item := record.Item{"type": "message"}
		for range g.r.Intn(4) {
			item[g.str()] = g.value(0)
		}
		e.OutputItems = append(e.OutputItems, item)
	}
	if len(e.OutputItems) > 0 && g.r.Intn(2) == 0 {
		i := g.r.Intn(len(e.OutputItems))
		e.TokenItemIndex = &i
	}
	if g.r.Intn(2) == 0 {
		raw, _ := record.Canonical(g.value(0))
		e.RoutedExperts = raw
	}
	if g.r.Intn(2) == 0 {
		e.Extra = map[string]json.RawMessage{}
		for range 1 + g.r.Intn(3) {
			raw, _ := record.Canonical(g.value(0))
			e.Extra["x_"+g.str()] = raw
		}
	}
	return e
}

var _ = Describe("random records", func() {
	It("survive encode → ParseLine → encode unchanged, with exact numbers", func() {
		g := entryGen{rand.New(rand.NewSource(GinkgoRandomSeed()))}
		for range 300 {
			e := g.entry()
			line, err := e.MarshalCanonical()
			Expect(err).NotTo(HaveOccurred())
			Expect(json.Valid(line)).To(BeTrue(), string(line))

			back, err := record.ParseLine(line)
			Expect(err).NotTo(HaveOccurred(), string(line))
			Expect(back.PromptTokenIDs).To(Equal(e.PromptTokenIDs))
			Expect(back.GenerationTokenIDs).To(Equal(e.GenerationTokenIDs))
			for i, lp := range e.GenerationLogProbs {
				Expect(math.Float64bits(back.GenerationLogProbs[i])).To(Equal(math.Float64bits(lp)), "log-prob %v", lp)
			}
			Expect(math.Float64bits(back.CreatedAt)).To(Equal(math.Float64bits(e.CreatedAt)))
			again, err := back.MarshalCanonical()
			Expect(err).NotTo(HaveOccurred())
			Expect(string(again)).To(Equal(string(line)))

			// The reflection decoder reads the same token arrays.
			var plain struct {
				Prompt   []int     `json:"prompt_token_ids"`
				LogProbs []float64 `json:"generation_log_probs"`
			}
			Expect(json.Unmarshal(line, &plain)).To(Succeed())
			Expect(plain.Prompt).To(Equal(back.PromptTokenIDs))
			Expect(plain.LogProbs).To(Equal(back.GenerationLogProbs))
		}
	})
})
