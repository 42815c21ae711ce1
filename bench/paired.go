package bench

import "time"

// Overhead is capture's cost measured as paired ratios: every job of a
// paired run went direct and through the proxy, in alternating order, so
// each ratio compares one request with itself under the same load.
type Overhead struct {
	Stage int `json:"stage"`
	Pairs int `json:"pairs"`
	// E2ELRatio and TTFTRatio are medians of per-pair proxy/direct ratios.
	E2ELRatio Interval `json:"e2el_ratio"`
	TTFTRatio Interval `json:"ttft_ratio"`
	// AddedE2ELMS is the median per-pair difference, proxy − direct.
	AddedE2ELMS Interval `json:"added_e2el_ms"`
	AddedTTFTMS Interval `json:"added_ttft_ms"`
	// BufferedTTFT is the share of proxied calls whose first chunk came
	// later than the direct call's by at least half the time the direct call
	// spent generating: a proxy that buffers the whole reply has a TTFT
	// equal to its E2EL, one that streams adds a small constant. Pairs whose direct generation took under a millisecond (a
	// zero-latency fake) say nothing either way and are not counted.
	BufferedTTFT float64 `json:"buffered_ttft_share"`
}

// PairedOverhead computes one Overhead per stage from the measured pairs.
func PairedOverhead(samples []Sample) []Overhead {
	type pair struct{ d, p *Sample }
	byStage := map[int]map[int]*pair{}
	var stages []int
	for i := range samples {
		s := &samples[i]
		if s.Phase != PhaseMeasure || !s.OK() || (s.Path != PathDirect && s.Path != PathProxy) {
			continue
		}
		m := byStage[s.Stage]
		if m == nil {
			m = map[int]*pair{}
			byStage[s.Stage] = m
			stages = append(stages, s.Stage)
		}
		pr := m[s.Pair]
		if pr == nil {
			pr = &pair{}
			m[s.Pair] = pr
		}
		if s.Path == PathDirect {
			pr.d = s
		} else {
			pr.p = s
		}
	}
	var out []Overhead
	for _, st := range stages {
		var e2e, ttft, addE, addT []float64
		buffered, judged, withTTFT := 0, 0, 0
		for _, pr := range byStage[st] {
			if pr.d == nil || pr.p == nil || pr.d.E2ELNS() <= 0 {
				continue
			}
			e2e = append(e2e, float64(pr.p.E2ELNS())/float64(pr.d.E2ELNS()))
			addE = append(addE, float64(pr.p.E2ELNS()-pr.d.E2ELNS())/1e6)
			if pr.d.TTFTNS() > 0 && pr.p.TTFTNS() > 0 {
				ttft = append(ttft, float64(pr.p.TTFTNS())/float64(pr.d.TTFTNS()))
				addT = append(addT, float64(pr.p.TTFTNS()-pr.d.TTFTNS())/1e6)
				withTTFT++
				if gen := pr.d.E2ELNS() - pr.d.TTFTNS(); gen >= int64(time.Millisecond) && pr.p.OutputTokens > 2 {
					judged++
					if pr.p.TTFTNS()-pr.d.TTFTNS() >= gen/2 {
						buffered++
					}
				}
			}
		}
		if len(e2e) == 0 {
			continue
		}
		o := Overhead{Stage: st, Pairs: len(e2e),
			E2ELRatio: BootstrapMedianCI(e2e, uint64(st)), AddedE2ELMS: BootstrapMedianCI(addE, uint64(st)+1)}
		if withTTFT > 0 {
			o.TTFTRatio = BootstrapMedianCI(ttft, uint64(st)+2)
			o.AddedTTFTMS = BootstrapMedianCI(addT, uint64(st)+3)
			if judged > 0 {
				o.BufferedTTFT = float64(buffered) / float64(judged)
			}
		}
		out = append(out, o)
	}
	return out
}
