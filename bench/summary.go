package bench

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Stats summarises one latency metric in milliseconds. Percentiles come
// from an HDR histogram at microsecond resolution, three significant digits.
type Stats struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean_ms"`
	Std   float64 `json:"std_ms"`
	Min   float64 `json:"min_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

// Histogram range: 1 µs to 1 hour.
const (
	minMicros = 1
	maxMicros = int64(time.Hour / time.Microsecond)
)

// histogram collects microsecond values.
type histogram struct{ h *hdrhistogram.Histogram }

func newHistogram() histogram { return histogram{hdrhistogram.New(minMicros, maxMicros, 3)} }

func (h histogram) addNS(ns int64) { h.addUS(ns / 1000) }

func (h histogram) addUS(us int64) { _ = h.h.RecordValue(min(max(us, minMicros), maxMicros)) }

func (h histogram) stats() Stats {
	if h.h.TotalCount() == 0 {
		return Stats{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	// ValueAtQuantile takes a percentage (0-100).
	return Stats{
		Count: int(h.h.TotalCount()), Mean: h.h.Mean() / 1000, Std: h.h.StdDev() / 1000,
		Min: ms(h.h.Min()), P50: ms(h.h.ValueAtQuantile(50)), P90: ms(h.h.ValueAtQuantile(90)),
		P95: ms(h.h.ValueAtQuantile(95)), P99: ms(h.h.ValueAtQuantile(99)),
		P999: ms(h.h.ValueAtQuantile(99.9)), Max: ms(h.h.Max()),
	}
}

// LatencyRecorder collects durations from many goroutines (store puts).
type LatencyRecorder struct {
	mu   sync.Mutex
	h    histogram
	errs int
}

// NewLatencyRecorder returns an empty recorder.
func NewLatencyRecorder() *LatencyRecorder { return &LatencyRecorder{h: newHistogram()} }

// Record adds one duration, or counts an error.
func (r *LatencyRecorder) Record(d time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.errs++
		return
	}
	r.h.addNS(d.Nanoseconds())
}

// Stats summarises what was recorded and the errors counted.
func (r *LatencyRecorder) Stats() (Stats, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h.stats(), r.errs
}

// SLO is a goodput target: a request is good when every set bound holds
// (vLLM's --goodput semantics). Zero bounds are not checked.
type SLO struct {
	TTFT time.Duration `json:"ttft_ns,omitempty"`
	TPOT time.Duration `json:"tpot_ns,omitempty"`
	E2EL time.Duration `json:"e2el_ns,omitempty"`
}

// Any reports whether at least one bound is set.
func (s SLO) Any() bool { return s.TTFT > 0 || s.TPOT > 0 || s.E2EL > 0 }

// String renders the SLO in the flag's syntax.
func (s SLO) String() string {
	var parts []string
	for _, p := range []struct {
		k string
		v time.Duration
	}{{"ttft", s.TTFT}, {"tpot", s.TPOT}, {"e2el", s.E2EL}} {
		if p.v > 0 {
			parts = append(parts, p.k+"="+p.v.String())
		}
	}
	return strings.Join(parts, ",")
}

// ParseSLO reads "ttft=2s,tpot=50ms[,e2el=30s]".
func ParseSLO(s string) (SLO, error) {
	var out SLO
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return out, fmt.Errorf("--slo %q: %q is not key=duration (keys ttft, tpot, e2el)", s, part)
		}
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil || d <= 0 {
			return out, fmt.Errorf("--slo %q: %s=%s is not a positive duration such as 2s or 50ms", s, k, v)
		}
		switch strings.ToLower(strings.TrimSpace(k)) {
		case "ttft":
			out.TTFT = d
		case "tpot":
			out.TPOT = d
		case "e2el":
			out.E2EL = d
		default:
			return out, fmt.Errorf("--slo %q: unknown key %q (want ttft, tpot or e2el)", s, k)
		}
	}
	return out, nil
}

// good reports whether a completed sample meets every bound of slo.
func (s SLO) good(x *Sample) bool {
	if s.TTFT > 0 && (x.FirstTokenNS == 0 || x.TTFTNS() > int64(s.TTFT)) {
		return false
	}
	if s.TPOT > 0 {
		if t, ok := x.TPOTNS(); ok && t > int64(s.TPOT) {
			return false
		}
	}
	if s.E2EL > 0 && x.E2ELNS() > int64(s.E2EL) {
		return false
	}
	return true
}

// Summary is every metric of one group of measured samples (one stage and
// path). docs/bench-results.md gives each definition.
type Summary struct {
	Stage int  `json:"stage"`
	Path  Path `json:"path"`
	// Shape of the stage, copied for reports.
	Concurrency int     `json:"concurrency,omitempty"`
	Rate        float64 `json:"rate,omitempty"`

	Requests     int               `json:"requests"`
	Completed    int               `json:"completed"`
	Failed       int               `json:"failed"`
	ErrorsByKind map[ErrorKind]int `json:"errors_by_kind,omitempty"`
	FirstError   string            `json:"first_error,omitempty"`
	Excluded     map[Phase]int     `json:"excluded,omitempty"`

	DurationS            float64 `json:"duration_s"`
	RequestThroughput    float64 `json:"request_throughput"`
	OutputThroughput     float64 `json:"output_throughput"`
	TotalTokenThroughput float64 `json:"total_token_throughput"`
	PeakOutputThroughput float64 `json:"peak_output_throughput"`
	PromptTokens         int64   `json:"total_input_tokens"`
	OutputTokens         int64   `json:"total_output_tokens"`
	MaxPromptTokens      int     `json:"max_prompt_tokens"`

	TTFT Stats `json:"ttft"`
	TPOT Stats `json:"tpot"`
	ITL  Stats `json:"itl"`
	E2EL Stats `json:"e2el"`

	GoodRequests int     `json:"good_requests,omitempty"`
	Goodput      float64 `json:"request_goodput,omitempty"`

	// Generator accuracy (open loop): delay between schedule and send, and
	// the requested vs achieved send rate.
	ScheduleDelay Stats   `json:"schedule_delay"`
	RequestedRate float64 `json:"requested_rate,omitempty"`
	AchievedRate  float64 `json:"achieved_rate"`
}

// Summarize computes one Summary per (stage, path) from the samples; only
// PhaseMeasure samples count, the others are reported as excluded.
func Summarize(samples []Sample, stages []StageInfo, slo SLO) []Summary {
	type key struct {
		stage int
		path  Path
	}
	groups := map[key][]*Sample{}
	everything := map[key][]*Sample{}
	excluded := map[key]map[Phase]int{}
	var order []key
	for i := range samples {
		s := &samples[i]
		k := key{s.Stage, s.Path}
		if _, ok := groups[k]; !ok {
			groups[k] = nil
			order = append(order, k)
		}
		everything[k] = append(everything[k], s)
		if s.Phase != PhaseMeasure {
			if excluded[k] == nil {
				excluded[k] = map[Phase]int{}
			}
			excluded[k][s.Phase]++
			continue
		}
		groups[k] = append(groups[k], s)
	}
	sort.Slice(order, func(i, j int) bool {
		if order[i].stage != order[j].stage {
			return order[i].stage < order[j].stage
		}
		return order[i].path < order[j].path
	})
	out := make([]Summary, 0, len(order))
	for _, k := range order {
		sum := summarizeGroup(groups[k], everything[k], slo)
		sum.Stage, sum.Path, sum.Excluded = k.stage, k.path, excluded[k]
		if k.stage >= 0 && k.stage < len(stages) { // stage index = position in stages
			sum.Concurrency = stages[k.stage].Shape.Concurrency
			sum.Rate = stages[k.stage].Shape.Rate
			if stages[k.stage].Shape.Arrival != Closed {
				sum.RequestedRate = stages[k.stage].Shape.Rate
			}
		}
		out = append(out, sum)
	}
	return out
}

// summarizeGroup computes one group's summary. Latencies come from the
// measured samples. Throughputs are steady-state rates: the output of every
// request of the group (whatever its phase) that finished inside the
// measurement window, from the first to the last measured start, divided by
// the window; the ramp-up and the drain at the end stay outside it. With
// fewer than two measured starts the window runs to the last measured end.
func summarizeGroup(ss, all []*Sample, slo SLO) Summary {
	var sum Summary
	ttft, tpot, itl, e2el, delay := newHistogram(), newHistogram(), newHistogram(), newHistogram(), newHistogram()
	first, lastStart, lastEnd := int64(math.MaxInt64), int64(math.MinInt64), int64(math.MinInt64)
	perSecond := map[int64]int64{}
	for _, s := range ss {
		sum.Requests++
		first, lastStart, lastEnd = min(first, s.StartNS), max(lastStart, s.StartNS), max(lastEnd, s.EndNS)
		delay.addNS(max(s.StartNS-s.ScheduledNS, 0))
		if !s.OK() {
			sum.Failed++
			if sum.ErrorsByKind == nil {
				sum.ErrorsByKind = map[ErrorKind]int{}
			}
			sum.ErrorsByKind[s.ErrorKind]++
			if sum.FirstError == "" {
				sum.FirstError = s.Error
			}
			continue
		}
		sum.Completed++
		sum.PromptTokens += int64(s.PromptTokens)
		sum.OutputTokens += int64(s.OutputTokens)
		sum.MaxPromptTokens = max(sum.MaxPromptTokens, s.PromptTokens)
		perSecond[s.EndNS/int64(time.Second)] += int64(s.OutputTokens)
		if s.FirstTokenNS > 0 {
			ttft.addNS(s.TTFTNS())
		}
		if t, ok := s.TPOTNS(); ok {
			tpot.addNS(t)
		}
		for _, g := range s.ChunkGapsUS {
			itl.addUS(g)
		}
		e2el.addNS(s.E2ELNS())
	}
	if sum.Requests == 0 {
		return sum
	}
	end := lastStart
	if end <= first {
		end = lastEnd
	}
	var done, good int
	var outTok, inTok int64
	for _, s := range all {
		if s.OK() && s.EndNS >= first && s.EndNS <= end {
			done++
			outTok += int64(s.OutputTokens)
			inTok += int64(s.PromptTokens)
			if slo.Any() && slo.good(s) {
				good++
			}
		}
	}
	if dur := float64(end-first) / 1e9; dur > 0 {
		sum.DurationS = dur
		sum.RequestThroughput = float64(done) / dur
		sum.OutputThroughput = float64(outTok) / dur
		sum.TotalTokenThroughput = float64(outTok+inTok) / dur
		if slo.Any() {
			sum.Goodput = float64(good) / dur
		}
	}
	if slo.Any() {
		for _, s := range ss {
			if s.OK() && slo.good(s) {
				sum.GoodRequests++
			}
		}
	}
	if span := float64(lastStart-first) / 1e9; span > 0 && sum.Requests > 1 {
		sum.AchievedRate = float64(sum.Requests-1) / span
	}
	for _, v := range perSecond {
		sum.PeakOutputThroughput = max(sum.PeakOutputThroughput, float64(v))
	}
	sum.TTFT, sum.TPOT, sum.ITL, sum.E2EL, sum.ScheduleDelay = ttft.stats(), tpot.stats(), itl.stats(), e2el.stats(), delay.stats()
	return sum
}
