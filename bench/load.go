package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Workload sends one job along one path and fills the sample's timing,
// token and error fields. It must be safe for concurrent use.
type Workload interface {
	// Paths lists where each job goes; with two paths every job is sent
	// both ways, in alternating order (a paired run).
	Paths() []Path
	// Send performs job along p. base is the run's clock origin.
	Send(ctx context.Context, job int, p Path, base time.Time, s *Sample)
}

// Windows exclude the start and end of every stage from the summaries, by
// job count or by time (both may be set; either excludes).
type Windows struct {
	WarmupRequests   int           `json:"warmup_requests,omitempty"`
	CooldownRequests int           `json:"cooldown_requests,omitempty"`
	Warmup           time.Duration `json:"warmup_ns,omitempty"`
	Cooldown         time.Duration `json:"cooldown_ns,omitempty"`
}

// LoadConfig is a run of one or more stages. Every stage stops at whichever
// of Requests (jobs) or Duration comes first; at least one must be set.
type LoadConfig struct {
	Stages   []Shape
	Requests int
	Duration time.Duration
	Windows  Windows
	Seed     uint64
	// Offsets are the send times of a Trace stage, one per job.
	Offsets []time.Duration
	// Rounds repeats the stage list (default 1), reversing its order every
	// other round, so slow drifts and noise bursts of a shared machine spread
	// over every point of a sweep; each run of a stage is its own StageInfo.
	Rounds int
	// Observe is called for every finished sample (progress); it must be
	// safe for concurrent use.
	Observe func(*Sample)
	// OnStage is called when a stage starts.
	OnStage func(i int, s Shape)
	// Shard runs this process's segment of the schedule (bench/shard.go):
	// job k goes to shard k mod Total; zero value: the whole schedule.
	Shard Shard
	// StartAt, when set, is waited for and becomes the clock origin, so
	// shards on several machines share one schedule (its open-loop arrivals
	// are laid from it).
	StartAt time.Time
}

// StageInfo is what happened in one stage.
type StageInfo struct {
	Index int `json:"index"`
	// Point is the position in the configured stage list (equal to Index
	// unless Rounds repeats the list).
	Point   int   `json:"point"`
	Round   int   `json:"round,omitempty"`
	Shape   Shape `json:"shape"`
	StartNS int64 `json:"start_ns"`
	EndNS   int64 `json:"end_ns"`
	Jobs    int   `json:"jobs"`
}

// Validate names the first problem by its flag.
func (c LoadConfig) Validate() error {
	if len(c.Stages) == 0 {
		return errors.New("bench: no stage to run")
	}
	for _, s := range c.Stages {
		if err := s.Validate(); err != nil {
			return err
		}
	}
	switch {
	case c.Requests < 0:
		return fmt.Errorf("--requests must not be negative, got %d", c.Requests)
	case c.Duration < 0:
		return fmt.Errorf("--duration must not be negative, got %s", c.Duration)
	case c.Stages[0].Arrival == Trace && len(c.Offsets) == 0:
		return errors.New("bench: a trace stage needs its offsets")
	case c.Requests == 0 && c.Duration == 0:
		return errors.New("set --requests or --duration so every stage ends")
	case c.Requests > 0 && c.Windows.WarmupRequests+c.Windows.CooldownRequests >= c.Requests:
		return fmt.Errorf("--warmup-requests + --cooldown-requests (%d) leave nothing of --requests %d to measure",
			c.Windows.WarmupRequests+c.Windows.CooldownRequests, c.Requests)
	}
	return c.validateShard()
}

// validateShard refuses schedules a shard cannot split exactly.
func (c LoadConfig) validateShard() error {
	sh := c.Shard
	if err := sh.Validate(); err != nil || !sh.Sharded() {
		return err
	}
	st := c.Stages[0]
	switch {
	case len(c.Stages) > 1 || c.Rounds > 1:
		return fmt.Errorf("--shard %s runs one stage: drop --sweep and --rounds (run one sharded bench per point)", sh)
	case st.Arrival == Closed && sh.Share(st.Concurrency) < 1:
		return fmt.Errorf("--shard %s: --concurrency %d over %d shards leaves shard %d without a worker; use at least %d",
			sh, st.Concurrency, sh.Total, sh.Index, sh.Total)
	case st.Arrival != Closed && st.Concurrency > 0 && sh.Share(st.Concurrency) < 1:
		return fmt.Errorf("--shard %s: the in-flight cap --concurrency %d over %d shards leaves shard %d no slot; use at least %d, or 0 for no cap",
			sh, st.Concurrency, sh.Total, sh.Index, sh.Total)
	case c.Requests > 0 && c.Requests < sh.Total:
		return fmt.Errorf("--shard %s: --requests %d over %d shards leaves a shard without a request", sh, c.Requests, sh.Total)
	}
	return nil
}

// LoadOutcome is the raw outcome of RunLoad.
type LoadOutcome struct {
	Samples     []Sample
	Stages      []StageInfo
	Interrupted bool
	// Base is the clock origin of the samples (StartAt when set); Started
	// is when the run actually began (after waiting for StartAt).
	Base    time.Time
	Started time.Time
}

// RunLoad runs every stage in order. Cancelling ctx interrupts the run: the
// samples gathered so far are returned with Interrupted set, and requests cut
// short are tagged cancelled and excluded.
func RunLoad(ctx context.Context, cfg LoadConfig, w Workload) (*LoadOutcome, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if w == nil || len(w.Paths()) == 0 {
		return nil, errors.New("bench: workload has no path to send to")
	}
	out, err := StartClock(ctx, cfg.StartAt)
	if err != nil {
		return nil, err
	}
	for i, pt := range stageOrder(len(cfg.Stages), max(cfg.Rounds, 1)) {
		if ctx.Err() != nil {
			break
		}
		shape := cfg.Stages[pt]
		if cfg.OnStage != nil {
			cfg.OnStage(i, shape)
		}
		st := runStage(ctx, cfg, w, i, shape, out.Base, uint64(pt)+cfg.Seed*1000003)
		st.info.Point, st.info.Round = pt, i/len(cfg.Stages)
		tagPhases(st.samples, cfg, st.info, st.globalJobs)
		out.Stages = append(out.Stages, st.info)
		out.Samples = append(out.Samples, st.samples...)
	}
	out.Interrupted = ctx.Err() != nil
	for i := range out.Samples {
		out.Samples[i].Seq = i
	}
	return out, nil
}

// StartClock waits for at (when set) and returns a fresh outcome whose
// clock origin is at itself (with the monotonic reading of now), so every
// shard's samples count from the one planned start.
func StartClock(ctx context.Context, at time.Time) (*LoadOutcome, error) {
	if at.IsZero() {
		now := time.Now()
		return &LoadOutcome{Base: now, Started: now}, nil
	}
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, fmt.Errorf("interrupted while waiting for --start-at %s: %w", at.UTC().Format(time.RFC3339Nano), ctx.Err())
		}
	}
	now := time.Now()
	return &LoadOutcome{Base: now.Add(at.Sub(now)), Started: now}, nil
}

type stageRun struct {
	info    StageInfo
	samples []Sample
	// globalJobs is the stage's job count over all shards, as far as this
	// shard can tell (exact for an unsharded run; merge recounts).
	globalJobs int
}

// jobCounter hands out job numbers until the budget or deadline ends: every
// step-th number from first (a closed-loop shard), or every number.
type jobCounter struct {
	mu       sync.Mutex
	next     int
	step     int
	limit    int
	deadline time.Time
	taken    int // jobs this process runs
	reached  int // one past the highest job number handed out
}

func (j *jobCounter) take(ctx context.Context) (int, bool) {
	if ctx.Err() != nil || (!j.deadline.IsZero() && time.Now().After(j.deadline)) {
		return 0, false
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.limit > 0 && j.next >= j.limit {
		return 0, false
	}
	n := j.next
	j.next += max(j.step, 1)
	j.taken++
	j.reached = n + 1
	return n, true
}

// peek is the next job number to be handed out.
func (j *jobCounter) peek() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.next
}

// disown gives back the count of a job another shard runs (open loop).
func (j *jobCounter) disown() {
	j.mu.Lock()
	j.taken--
	j.mu.Unlock()
}

func runStage(ctx context.Context, cfg LoadConfig, w Workload, idx int, shape Shape, base time.Time, seed uint64) stageRun {
	start := time.Now()
	jobs := &jobCounter{limit: cfg.Requests}
	configured := shape
	if shape.Arrival == Closed && cfg.Shard.Sharded() {
		jobs.next, jobs.step = cfg.Shard.Index, cfg.Shard.Total
		shape.Concurrency = cfg.Shard.Share(shape.Concurrency)
	}
	if cfg.Duration > 0 {
		jobs.deadline = start.Add(cfg.Duration)
	}
	var (
		mu     sync.Mutex
		blocks [][]Sample
	)
	collect := func(ss ...[]Sample) {
		mu.Lock()
		blocks = append(blocks, ss...)
		mu.Unlock()
	}
	// send fills ss, one sample per path.
	send := func(job int, scheduled int64, ss []Sample) {
		paths := w.Paths()
		for k := range paths {
			p := paths[(k+job)%len(paths)] // alternate who goes first
			s := &ss[k]
			*s = Sample{Stage: idx, Path: p, Pair: job}
			s.ScheduledNS = scheduled
			if k > 0 || scheduled < 0 { // closed loop: no schedule, sent at once
				s.ScheduledNS = time.Since(base).Nanoseconds()
			}
			w.Send(ctx, job, p, base, s)
			if ctx.Err() != nil && !s.OK() {
				s.ErrorKind, s.Phase = ErrCanceled, PhaseCooldown
			}
			if cfg.Observe != nil {
				cfg.Observe(s)
			}
		}
	}
	perJob := len(w.Paths())
	var wg sync.WaitGroup
	if shape.Arrival == Closed {
		for range shape.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine sampleBlocks
				for {
					job, ok := jobs.take(ctx)
					if !ok {
						break
					}
					send(job, -1, mine.take(perJob))
				}
				collect(mine.blocks...)
			}()
		}
	} else {
		anchor := time.Now()
		if idx == 0 {
			anchor = base // the schedule counts from the clock origin
		}
		runOpen(ctx, shape, seed, cfg.Offsets, jobs, anchor, base, cfg.Shard, &wg, func(job int, sched int64) {
			ss := make([]Sample, perJob)
			send(job, sched, ss)
			collect(ss)
		})
	}
	wg.Wait()
	n := 0
	for _, b := range blocks {
		n += len(b)
	}
	all := make([]Sample, 0, n)
	for _, b := range blocks {
		all = append(all, b...)
	}
	// The shape stays the configured one (the whole schedule's); a shard's
	// share of the workers is in its ShardInfo.
	info := StageInfo{Index: idx, Shape: configured, StartNS: start.Sub(base).Nanoseconds(), EndNS: time.Since(base).Nanoseconds(), Jobs: jobs.taken}
	global := jobs.taken
	if cfg.Shard.Sharded() {
		global = jobs.reached
		if cfg.Requests > 0 && ctx.Err() == nil && (jobs.deadline.IsZero() || time.Now().Before(jobs.deadline)) {
			global = cfg.Requests
		}
	}
	return stageRun{info: info, samples: all, globalJobs: global}
}

// sampleBlocks holds one worker's samples in fixed-size blocks, so a long
// closed-loop run never copies (or has the collector rescan) the samples it
// already holds as it grows.
type sampleBlocks struct{ blocks [][]Sample }

const sampleBlockLen = 1024

// take returns the next n zeroed samples.
func (b *sampleBlocks) take(n int) []Sample {
	if k := len(b.blocks); k == 0 || cap(b.blocks[k-1])-len(b.blocks[k-1]) < n {
		b.blocks = append(b.blocks, make([]Sample, 0, max(sampleBlockLen, n)))
	}
	last := &b.blocks[len(b.blocks)-1]
	*last = (*last)[:len(*last)+n]
	return (*last)[len(*last)-n:]
}

// runOpen starts jobs on the arrival schedule. With a concurrency cap, a
// start waits for a free slot; the wait is the sample's schedule delay.
// A shard walks the whole seeded schedule and fires only its own arrivals
// (job k mod N), so the shards' arrivals together are the one schedule.
// With a cap, each shard caps its own in-flight requests at its share.
func runOpen(ctx context.Context, shape Shape, seed uint64, offsets []time.Duration, jobs *jobCounter, anchor, base time.Time, sh Shard, wg *sync.WaitGroup, fire func(int, int64)) {
	g := newGaps(shape, seed)
	var slots chan struct{}
	if shape.Concurrency > 0 {
		slots = make(chan struct{}, sh.Share(shape.Concurrency))
	}
	next := anchor
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		if d := time.Until(next); d > 0 && sh.Owns(jobs.peek()) {
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-ctx.Done():
				return
			}
		}
		job, ok := jobs.take(ctx)
		if !ok {
			return
		}
		sched := next.Sub(base).Nanoseconds()
		if !sh.Owns(job) {
			jobs.disown()
		} else if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		if sh.Owns(job) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if slots != nil {
					defer func() { <-slots }()
				}
				fire(job, sched)
			}()
		}
		switch {
		case shape.Arrival != Trace:
			next = next.Add(g.next())
		case job+1 < len(offsets):
			next = next.Add(offsets[job+1] - offsets[job])
		default:
			return
		}
	}
}

// tagPhases marks warm-up and cool-down samples of one stage: by job number
// (the first and last jobs) and by start time relative to the stage.
// jobs is the stage's job count over all shards.
func tagPhases(ss []Sample, cfg LoadConfig, info StageInfo, jobs int) {
	lastStart := info.StartNS
	for i := range ss {
		lastStart = max(lastStart, ss[i].StartNS)
	}
	sortByStart(ss)
	win := cfg.Windows
	for i := range ss {
		s := &ss[i]
		if s.Phase != "" {
			continue
		}
		s.Phase = PhaseMeasure
		since := s.StartNS - info.StartNS
		switch {
		case s.Pair < win.WarmupRequests, win.Warmup > 0 && since < int64(win.Warmup):
			s.Phase = PhaseWarmup
		case win.CooldownRequests > 0 && s.Pair >= jobs-win.CooldownRequests,
			win.Cooldown > 0 && s.StartNS > lastStart-int64(win.Cooldown):
			s.Phase = PhaseCooldown
		}
	}
}

// sortByStart orders samples by start time, stably. A Sample is some 200
// bytes: the order is worked out on (start, index) keys, which a plain sort
// orders as a stable one would (ties by index), and applied in one pass.
func sortByStart(ss []Sample) {
	if slices.IsSortedFunc(ss, func(a, b Sample) int { return cmp.Compare(a.StartNS, b.StartNS) }) {
		return
	}
	type key struct {
		start int64
		at    int
	}
	keys := make([]key, len(ss))
	for i := range ss {
		keys[i] = key{ss[i].StartNS, i}
	}
	slices.SortFunc(keys, func(a, b key) int {
		if c := cmp.Compare(a.start, b.start); c != 0 {
			return c
		}
		return cmp.Compare(a.at, b.at)
	})
	sorted := make([]Sample, len(ss))
	for i, k := range keys {
		sorted[i] = ss[k.at]
	}
	copy(ss, sorted)
}

// stageOrder lists the stage indices of every round, reversing odd rounds.
func stageOrder(n, rounds int) []int {
	var out []int
	for r := range rounds {
		for i := range n {
			if r%2 == 1 {
				out = append(out, n-1-i)
			} else {
				out = append(out, i)
			}
		}
	}
	return out
}
