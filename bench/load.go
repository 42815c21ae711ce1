package bench

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	return nil
}

// LoadOutcome is the raw outcome of RunLoad.
type LoadOutcome struct {
	Samples     []Sample
	Stages      []StageInfo
	Interrupted bool
	Base        time.Time
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
	out := &LoadOutcome{Base: time.Now()}
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
		tagPhases(st.samples, cfg, st.info)
		out.Stages = append(out.Stages, st.info)
		out.Samples = append(out.Samples, st.samples...)
	}
	out.Interrupted = ctx.Err() != nil
	for i := range out.Samples {
		out.Samples[i].Seq = i
	}
	return out, nil
}

type stageRun struct {
	info    StageInfo
	samples []Sample
}

// jobCounter hands out job numbers until the budget or deadline ends.
type jobCounter struct {
	mu       sync.Mutex
	next     int
	limit    int
	deadline time.Time
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
	j.next++
	return n, true
}

func runStage(ctx context.Context, cfg LoadConfig, w Workload, idx int, shape Shape, base time.Time, seed uint64) stageRun {
	start := time.Now()
	jobs := &jobCounter{limit: cfg.Requests}
	if cfg.Duration > 0 {
		jobs.deadline = start.Add(cfg.Duration)
	}
	var (
		mu  sync.Mutex
		all []Sample
	)
	collect := func(ss []Sample) {
		mu.Lock()
		all = append(all, ss...)
		mu.Unlock()
	}
	send := func(job int, scheduled int64) []Sample {
		paths := w.Paths()
		ss := make([]Sample, len(paths))
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
		return ss
	}
	var wg sync.WaitGroup
	if shape.Arrival == Closed {
		for range shape.Concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var mine []Sample
				for {
					job, ok := jobs.take(ctx)
					if !ok {
						break
					}
					mine = append(mine, send(job, -1)...)
				}
				collect(mine)
			}()
		}
	} else {
		runOpen(ctx, shape, seed, cfg.Offsets, jobs, base, &wg, func(job int, sched int64) { collect(send(job, sched)) })
	}
	wg.Wait()
	info := StageInfo{Index: idx, Shape: shape, StartNS: start.Sub(base).Nanoseconds(), EndNS: time.Since(base).Nanoseconds(), Jobs: jobs.next}
	return stageRun{info: info, samples: all}
}

// runOpen starts jobs on the arrival schedule. With a concurrency cap, a
// start waits for a free slot; the wait is the sample's schedule delay.
func runOpen(ctx context.Context, shape Shape, seed uint64, offsets []time.Duration, jobs *jobCounter, base time.Time, wg *sync.WaitGroup, fire func(int, int64)) {
	g := newGaps(shape, seed)
	var slots chan struct{}
	if shape.Concurrency > 0 {
		slots = make(chan struct{}, shape.Concurrency)
	}
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for {
		if d := time.Until(next); d > 0 {
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
		if slots != nil {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if slots != nil {
				defer func() { <-slots }()
			}
			fire(job, sched)
		}()
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
func tagPhases(ss []Sample, cfg LoadConfig, info StageInfo) {
	lastStart := info.StartNS
	for i := range ss {
		lastStart = max(lastStart, ss[i].StartNS)
	}
	sort.SliceStable(ss, func(i, j int) bool { return ss[i].StartNS < ss[j].StartNS })
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
		case win.CooldownRequests > 0 && s.Pair >= info.Jobs-win.CooldownRequests,
			win.Cooldown > 0 && s.StartNS > lastStart-int64(win.Cooldown):
			s.Phase = PhaseCooldown
		}
	}
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
