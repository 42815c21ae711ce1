package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Shard is one process's segment of a load schedule split over Total
// processes (docs/bench-results.md, "Sharded load"). Job k of a stage belongs
// to shard k mod Total, for closed and open loops alike, so the union of the
// shards' jobs is exactly the single process's; a closed loop's workers split
// as k6's execution segments do (floor/ceil shares that sum to the whole).
// The zero value is an unsharded run.
type Shard struct {
	Index int `json:"index"`
	Total int `json:"total"`
}

// Sharded reports whether s splits the schedule.
func (s Shard) Sharded() bool { return s.Total > 1 }

// Owns reports whether job belongs to this shard.
func (s Shard) Owns(job int) bool { return !s.Sharded() || job%s.Total == s.Index }

// Share is this shard's part of n: floor((i+1)n/N) - floor(in/N), so the
// shares of all shards sum to n and differ by at most one.
func (s Shard) Share(n int) int {
	if !s.Sharded() {
		return n
	}
	return (s.Index+1)*n/s.Total - s.Index*n/s.Total
}

// Jobs is how many of n jobs this shard runs (those k < n with k mod
// Total = Index): ceil((n-Index)/Total).
func (s Shard) Jobs(n int) int {
	if !s.Sharded() {
		return n
	}
	return max(0, (n-s.Index+s.Total-1)/s.Total)
}

// Validate names the flag at fault.
func (s Shard) Validate() error {
	if s.Total == 0 && s.Index == 0 {
		return nil
	}
	if s.Total < 1 || s.Index < 0 || s.Index >= s.Total {
		return fmt.Errorf("--shard %d/%d: want I/N with 0 <= I < N", s.Index, s.Total)
	}
	return nil
}

// String is "I/N".
func (s Shard) String() string { return strconv.Itoa(s.Index) + "/" + strconv.Itoa(s.Total) }

// ParseShard reads "I/N" (0-based index).
func ParseShard(v string) (Shard, error) {
	a, b, ok := strings.Cut(v, "/")
	i, errI := strconv.Atoi(strings.TrimSpace(a))
	n, errN := strconv.Atoi(strings.TrimSpace(b))
	if !ok || errI != nil || errN != nil {
		return Shard{}, fmt.Errorf("--shard %q: want I/N, e.g. 0/4 (index from 0)", v)
	}
	s := Shard{Index: i, Total: n}
	if n < 1 {
		return Shard{}, fmt.Errorf("--shard %s: want I/N with 0 <= I < N", s)
	}
	return s, s.Validate()
}

// ShardFromEnv resolves the shard of a process: --shard I/N when given,
// else the index from JOB_COMPLETION_INDEX (a Kubernetes Indexed Job) with
// the total from --shards or CAPBENCH_SHARDS. getenv is os.Getenv in use.
func ShardFromEnv(flag string, shards int, getenv func(string) string) (Shard, error) {
	if flag != "" {
		return ParseShard(flag)
	}
	idx := strings.TrimSpace(getenv("JOB_COMPLETION_INDEX"))
	if idx == "" {
		if shards > 0 {
			return Shard{}, fmt.Errorf("--shards %d needs --shard I/N or JOB_COMPLETION_INDEX (set by a Kubernetes Indexed Job)", shards)
		}
		return Shard{}, nil
	}
	i, err := strconv.Atoi(idx)
	if err != nil {
		return Shard{}, fmt.Errorf("JOB_COMPLETION_INDEX=%q is not a number", idx)
	}
	if shards == 0 {
		if v := strings.TrimSpace(getenv("CAPBENCH_SHARDS")); v != "" {
			if shards, err = strconv.Atoi(v); err != nil {
				return Shard{}, fmt.Errorf("CAPBENCH_SHARDS=%q is not a number", v)
			}
		}
	}
	if shards == 0 {
		return Shard{}, errors.New("JOB_COMPLETION_INDEX is set: give the shard total with --shards N or CAPBENCH_SHARDS (the Job's completions)")
	}
	s := Shard{Index: i, Total: shards}
	if err := s.Validate(); err != nil {
		return Shard{}, fmt.Errorf("JOB_COMPLETION_INDEX=%d with %d shards: want an index below the total", i, shards)
	}
	return s, nil
}

// ShardInfo is what a shard records about itself in its result.
type ShardInfo struct {
	Index int `json:"index"`
	Total int `json:"total"`
	// PlannedStart is --start-at (zero when none); ActualStart is when the
	// shard's clock origin was taken (its samples' 0), after waiting for it.
	PlannedStart time.Time `json:"planned_start,omitzero"`
	ActualStart  time.Time `json:"actual_start"`
	// Concurrency is this shard's share of a closed loop's workers.
	Concurrency int `json:"concurrency,omitempty"`
}

// Origin is the wall-clock time of the shard's samples' 0: the planned
// start, else the actual one.
func (s ShardInfo) Origin() time.Time {
	if s.PlannedStart.IsZero() {
		return s.ActualStart
	}
	return s.PlannedStart
}

// LagNS is how late the shard started against the planned start (0 when
// none was planned).
func (s ShardInfo) LagNS() int64 {
	if s.PlannedStart.IsZero() {
		return 0
	}
	return s.ActualStart.Sub(s.PlannedStart).Nanoseconds()
}

// MergedShard is one input of a merge, as the merged result reports it.
type MergedShard struct {
	ShardInfo
	Source     string  `json:"source"`
	Samples    int     `json:"samples"`
	Failed     int     `json:"failed"`
	StartLagMS float64 `json:"start_lag_ms"`
	// Late: started beyond the tolerance after the planned start (or after
	// the earliest shard when none was planned).
	Late        bool `json:"late,omitempty"`
	Interrupted bool `json:"interrupted,omitempty"`
	// NoneOK: the shard sent requests and every one failed.
	NoneOK bool `json:"none_ok,omitempty"`
}

// MergeInfo describes a result merged from shards.
type MergeInfo struct {
	Shards          []MergedShard `json:"shards"`
	LateToleranceMS float64       `json:"late_tolerance_ms"`
	// Problems lists late, interrupted or failed shards in words.
	Problems []string `json:"problems,omitempty"`
}

// MergeShards combines the results of shards 0..N-1 of one schedule into the
// result a single process would have written: samples re-based to a common
// clock (the planned start, else the earliest shard start), phases re-tagged
// over the union and every summary recomputed. It refuses missing or
// duplicate shards, different totals and different configurations; late,
// interrupted and all-failed shards are kept and listed in Merge.Problems.
// sources name the inputs in messages (the file paths).
func MergeShards(rs []*Result, sources []string, lateTolerance time.Duration) (*Result, error) {
	if len(rs) == 0 {
		return nil, errors.New("merge: no shard result given")
	}
	if len(sources) != len(rs) {
		sources = make([]string, len(rs))
		for k := range rs {
			sources[k] = fmt.Sprintf("result %d", k+1)
		}
	}
	if err := checkShardSet(rs, sources); err != nil {
		return nil, err
	}
	byIndex := make([]int, len(rs))
	for k, r := range rs {
		byIndex[r.Shard.Index] = k
	}
	origin := rs[0].Shard.Origin()
	for _, r := range rs {
		if r.Shard.Origin().Before(origin) {
			origin = r.Shard.Origin()
		}
	}
	out := &Result{StartedAt: origin.UTC(), Config: rs[0].Config, Merge: &MergeInfo{LateToleranceMS: ms(lateTolerance)}}
	out.Config.URL, out.Config.ProxyURL, out.Config.CaptureDir = mergedField(rs, func(c Config) string { return c.URL }),
		mergedField(rs, func(c Config) string { return c.ProxyURL }), mergedField(rs, func(c Config) string { return c.CaptureDir })
	stage := StageInfo{Shape: rs[0].Config.Stages[0], StartNS: -1}
	for _, k := range byIndex {
		r := rs[k]
		shift := r.Shard.Origin().Sub(origin).Nanoseconds()
		for _, s := range r.Samples {
			rebase(&s, shift)
			if s.ErrorKind != ErrCanceled && out.Config.Workload != WorkloadSessions {
				s.Phase = ""
			}
			out.Samples = append(out.Samples, s)
		}
		out.Sessions = mergeSessions(out.Sessions, r.Sessions)
		for _, st := range r.Stages {
			if stage.StartNS < 0 || st.StartNS+shift < stage.StartNS {
				stage.StartNS = st.StartNS + shift
			}
			stage.EndNS = max(stage.EndNS, st.EndNS+shift)
			stage.Jobs += st.Jobs
		}
		out.Interrupted = out.Interrupted || r.Interrupted
		out.Merge.Shards = append(out.Merge.Shards, describeShard(r, sources[k], shift, lateTolerance, out.Merge))
	}
	stage.StartNS = max(stage.StartNS, 0)
	out.Stages = []StageInfo{stage}
	if out.Config.Workload != WorkloadSessions { // sessions keep their own phases
		tagPhases(out.Samples, LoadConfig{Windows: rs[0].Config.Windows}, stage, stage.Jobs)
	} else {
		sortByStart(out.Samples)
	}
	for i := range out.Samples {
		out.Samples[i].Seq = i
	}
	out.Finish()
	return out, nil
}

func checkShardSet(rs []*Result, sources []string) error {
	for k, r := range rs {
		if r.Shard == nil {
			return fmt.Errorf("merge: %s is not a shard result (run it with capbench bench --shard I/N)", sources[k])
		}
	}
	n := rs[0].Shard.Total
	seen := map[int]string{}
	for k, r := range rs {
		switch {
		case r.Merge != nil:
			return fmt.Errorf("merge: %s is already a merged result", sources[k])
		case r.Shard.Total != n:
			return fmt.Errorf("merge: %s is one of %d shards, %s one of %d; pass the results of one run", sources[0], n, sources[k], r.Shard.Total)
		case r.Shard.Index < 0 || r.Shard.Index >= n:
			return fmt.Errorf("merge: %s says it is shard %d of %d, outside 0..%d", sources[k], r.Shard.Index, n, n-1)
		case len(r.Config.Stages) != 1:
			return fmt.Errorf("merge: %s has %d stages; sharded runs have one", sources[k], len(r.Config.Stages))
		}
		if prev, dup := seen[r.Shard.Index]; dup {
			return fmt.Errorf("merge: %s and %s are both shard %d of %d", prev, sources[k], r.Shard.Index, n)
		}
		seen[r.Shard.Index] = sources[k]
		if why := rs[0].Config.Comparable(r.Config); why != "" {
			return fmt.Errorf("merge: %s and %s ran different schedules: %s", sources[0], sources[k], why)
		}
		if !r.Shard.PlannedStart.Equal(rs[0].Shard.PlannedStart) {
			return fmt.Errorf("merge: %s planned its start at %s, %s at %s; shards of one run share --start-at",
				sources[0], fmtTime(rs[0].Shard.PlannedStart), sources[k], fmtTime(r.Shard.PlannedStart))
		}
	}
	var missing []string
	for i := range n {
		if _, ok := seen[i]; !ok {
			missing = append(missing, strconv.Itoa(i))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("merge: shard(s) %s of %d missing (%d of %d results given); a failed shard's pod may have left none: rerun it or the Job",
			strings.Join(missing, ", "), n, len(rs), n)
	}
	return nil
}

func describeShard(r *Result, src string, shift int64, tol time.Duration, m *MergeInfo) MergedShard {
	d := MergedShard{ShardInfo: *r.Shard, Source: src, Samples: len(r.Samples), Interrupted: r.Interrupted}
	ok := 0
	for i := range r.Samples {
		if r.Samples[i].OK() {
			ok++
		} else {
			d.Failed++
		}
	}
	lag := r.Shard.LagNS()
	if r.Shard.PlannedStart.IsZero() {
		lag = shift
	}
	d.StartLagMS = float64(lag) / 1e6
	d.Late = lag > tol.Nanoseconds()
	d.NoneOK = d.Samples > 0 && ok == 0
	name := fmt.Sprintf("shard %s (%s)", r.Shard.Label(), src)
	if d.Late {
		m.Problems = append(m.Problems, fmt.Sprintf("%s started %.1f ms late (tolerance %.1f ms)", name, d.StartLagMS, ms(tol)))
	}
	if d.Interrupted {
		m.Problems = append(m.Problems, name+" was interrupted")
	}
	if d.NoneOK {
		m.Problems = append(m.Problems, fmt.Sprintf("%s: every one of its %d requests failed", name, d.Samples))
	}
	if d.Samples == 0 {
		m.Problems = append(m.Problems, name+" sent no request")
	}
	return d
}

// Label is "I/N" of the shard.
func (s ShardInfo) Label() string { return Shard{Index: s.Index, Total: s.Total}.String() }

// mergeSessions adds a shard's sessions to the merged ones.
func mergeSessions(into, add *Sessions) *Sessions {
	if add == nil {
		return into
	}
	if into == nil {
		into = &Sessions{MaskReasons: map[string]int{}}
	}
	into.Count += add.Count
	into.Masked += add.Masked
	for k, v := range add.MaskReasons {
		into.MaskReasons[k] += v
	}
	into.Outcomes = append(into.Outcomes, add.Outcomes...)
	return into
}

func rebase(s *Sample, shift int64) {
	s.ScheduledNS += shift
	s.StartNS += shift
	s.EndNS += shift
	if s.FirstTokenNS != 0 {
		s.FirstTokenNS += shift
	}
}

// mergedField is the shards' common value, or "" when they differ.
func mergedField(rs []*Result, get func(Config) string) string {
	v := get(rs[0].Config)
	for _, r := range rs {
		if get(r.Config) != v {
			return ""
		}
	}
	return v
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "(none)"
	}
	return t.UTC().Format(time.RFC3339Nano)
}
