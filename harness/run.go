package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

// Faults deliberately break the system under test, to prove the suite
// notices (a broken proxy that loses a call, a consumer with a flipped
// masking rule).
type Faults struct {
	// DropPut silently drops the n-th record of each rollout (1-based).
	DropPut int
	// FlipMask inverts mask_sample on every finalized record.
	FlipMask bool
}

// Options configure a run.
type Options struct {
	// Backend selects the environment (default in-process).
	Backend env.Backend
	// OutDir receives rollouts.jsonl and the capture directory (in-process
	// and process backends). Empty: a temp dir removed at the end.
	OutDir string
	// Rollouts per scenario (default 1).
	Rollouts int
	// Concurrency bounds parallel rollouts within a scenario (default 4).
	Concurrency int
	// VLLMURL, ProxyURL and CaptureDir configure the external backend.
	VLLMURL    string
	ProxyURL   string
	CaptureDir string
	// Image is the real vLLM image (vllm backend).
	Image string
	// Binary is a prebuilt capbench binary for the process backend and the
	// container image (static for containers); empty builds one.
	Binary string
	// Faults are deliberate breakages (tests only).
	Faults Faults
	// Consumer overrides the consumer options (zero = Gym's defaults).
	Consumer *consumer.Options
	// Logger receives component logs; nil discards them.
	Logger *slog.Logger
	// OnScenario is called after each scenario (progress output).
	OnScenario func(ScenarioResult)
}

func (o Options) rollouts() int {
	if o.Rollouts > 0 {
		return o.Rollouts
	}
	return 1
}

func (o Options) consumerOptions() consumer.Options {
	opts := consumer.DefaultOptions()
	if o.Consumer != nil {
		opts = *o.Consumer
	}
	if opts.Logger == nil {
		// Masked rollouts are what many scenarios expect; their warnings go
		// where the other component logs go (nowhere unless asked).
		opts.Logger = o.Logger
		if opts.Logger == nil {
			opts.Logger = slog.New(slog.DiscardHandler)
		}
	}
	return opts
}

// Session runs scenarios against environments it builds lazily, one per
// distinct server configuration, and writes every record to one JSONL file.
type Session struct {
	opts   Options
	out    string
	tmp    string
	writer *consumer.Writer
	// inputs holds the records before finalization (InputsFileName).
	inputs *consumer.Writer
	envs   map[string]env.Env
	// binary and image are built once per session for the process and
	// container backends (unless Options.Binary is given).
	binary, binDir, image string
	prepErr               error
	// externalKey is the server settings an external vLLM is taken to run
	// (see externalServer); "" for the other backends.
	externalKey string
}

// RolloutsFileName is the records file inside the out dir.
const RolloutsFileName = "rollouts.jsonl"

// InputsFileName holds the same records as the agents handed them over,
// before finalization replaced response.output: what `capbench explain
// --rollouts` needs (see docs/run.md).
const InputsFileName = "rollouts.input.jsonl"

// NewSession prepares the out dir and the records file.
func NewSession(opts Options) (*Session, error) {
	s := &Session{opts: opts, envs: map[string]env.Env{}}
	s.out = opts.OutDir
	if s.out == "" {
		dir, err := os.MkdirTemp("", "capbench-run-")
		if err != nil {
			return nil, err
		}
		s.out, s.tmp = dir, dir
	}
	if err := os.MkdirAll(s.out, 0o755); err != nil {
		return nil, fmt.Errorf("out dir: %w", err)
	}
	w, err := consumer.CreateWriter(filepath.Join(s.out, RolloutsFileName))
	if err != nil {
		return nil, fmt.Errorf("rollouts file: %w", err)
	}
	s.writer = w
	in, err := consumer.CreateWriter(filepath.Join(s.out, InputsFileName))
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("rollouts file: %w", err)
	}
	s.inputs = in
	return s, nil
}

// OutDir is where the session writes.
func (s *Session) OutDir() string { return s.out }

// Close stops every environment and closes the records file.
func (s *Session) Close() error {
	var errs []error
	for _, e := range s.envs {
		errs = append(errs, e.Close())
	}
	s.envs = map[string]env.Env{}
	if s.image != "" {
		errs = append(errs, env.RemoveImage(context.Background(), s.image))
		s.image = ""
	}
	if s.binDir != "" {
		errs = append(errs, os.RemoveAll(s.binDir))
		s.binDir = ""
	}
	if s.writer != nil {
		errs = append(errs, s.writer.Close())
		s.writer = nil
	}
	if s.inputs != nil {
		errs = append(errs, s.inputs.Close())
		s.inputs = nil
	}
	if s.tmp != "" {
		errs = append(errs, os.RemoveAll(s.tmp))
	}
	return errors.Join(errs...)
}

func (s *Session) captureDir() string {
	if s.opts.CaptureDir != "" {
		return s.opts.CaptureDir
	}
	switch s.opts.Backend {
	case env.InProcess, env.Process, "":
		return filepath.Join(s.out, "capture")
	}
	return ""
}

// envFor returns (building on first use) the environment a scenario needs.
func (s *Session) envFor(ctx context.Context, sc scenarios.Scenario) (env.Env, error) {
	faults := env.StoreFaults{FailPut: sc.Capture.FailPut, DropPut: s.opts.Faults.DropPut}
	key := fmt.Sprintf("%s|%+v", sc.Server.Key(), faults)
	if e, ok := s.envs[key]; ok {
		return e, nil
	}
	if err := s.prepare(context.WithoutCancel(ctx)); err != nil {
		return nil, err
	}
	// The environment outlives this call (it is shared by later scenarios),
	// so it must not be tied to the caller's context.
	e, err := env.Start(context.WithoutCancel(ctx), env.Spec{
		Backend: s.opts.Backend, Server: sc.Server, CaptureDir: s.captureDir(), Faults: faults,
		VLLMURL: s.opts.VLLMURL, ProxyURL: s.opts.ProxyURL, Image: s.opts.Image, Binary: s.binary,
		CapbenchImage: s.image, Logger: s.opts.Logger,
	})
	if err != nil {
		return nil, err
	}
	s.envs[key] = e
	return e, nil
}

// prepare builds what the process and container backends share: one
// capbench binary and, for containers, one image.
func (s *Session) prepare(ctx context.Context) error {
	b := s.opts.Backend
	if b != env.Process && b != env.Container {
		return nil
	}
	if s.prepErr != nil {
		return s.prepErr
	}
	s.prepErr = s.build(ctx, b)
	return s.prepErr
}

func (s *Session) build(ctx context.Context, b env.Backend) error {
	if s.binary == "" {
		s.binary = s.opts.Binary
	}
	if s.binary == "" {
		dir, err := os.MkdirTemp("", "capbench-bin-")
		if err != nil {
			return err
		}
		s.binDir = dir
		if s.binary, err = env.BuildBinary(ctx, dir, true); err != nil {
			return err
		}
	}
	if b == env.Container && s.image == "" {
		if ok, why := env.DockerUsable(ctx); !ok {
			return fmt.Errorf("%w: no container engine: %s", env.ErrUnavailable, why)
		}
		tag, err := env.BuildImage(ctx, s.binary)
		if err != nil {
			return err
		}
		s.image = tag
	}
	return nil
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// RolloutID is the explicit rollout id of a scenario's i-th rollout.
func RolloutID(scenario string, i int) string {
	return unsafeID.ReplaceAllString(scenario, ".") + "-" + strconv.Itoa(i)
}

// Scenario runs one scenario and evaluates it.
func (s *Session) Scenario(ctx context.Context, sc scenarios.Scenario) (res ScenarioResult) {
	start := time.Now()
	res = ScenarioResult{Name: sc.Name, Description: sc.Description, Row: string(sc.Row),
		Agent: string(sc.Agent), Streaming: sc.Streaming(), Expected: sc.Expect}
	defer func() {
		res.Timings.TotalMS = ms(time.Since(start))
		if s.opts.OnScenario != nil {
			s.opts.OnScenario(res)
		}
	}()
	if err := sc.Validate(); err != nil {
		return fail(res, err.Error())
	}
	if s.externalKey != "" && sc.Server.Key() != s.externalKey {
		res.Status, res.SkipReason = StatusSkip, otherServerReason(sc)
		return res
	}
	e, err := s.envFor(ctx, sc)
	if err != nil {
		if errors.Is(err, env.ErrUnavailable) || errors.Is(err, env.ErrUnsupported) {
			res.Status, res.SkipReason = StatusSkip, err.Error()
			return res
		}
		return fail(res, "environment: "+err.Error())
	}
	// An unscripted scenario installs nothing: the engine answers as it likes.
	if !sc.Unscripted {
		if err := e.SetScripts(ctx, sc.Scripts); err != nil {
			if errors.Is(err, env.ErrUnsupported) {
				res.Status, res.SkipReason = StatusSkip, err.Error()
				return res
			}
			return fail(res, "scripts: "+err.Error())
		}
	}
	tasks := make([]Task, s.opts.rollouts())
	for i := range tasks {
		t := agent.Target{BaseURL: e.ProxyURL(), RolloutID: RolloutID(sc.Name, i)}
		if err := e.DeleteRollout(ctx, t.RolloutID); err != nil {
			return fail(res, "delete stale records: "+err.Error())
		}
		plan := sc.Plan
		if plan.Model == "" {
			plan.Model = sc.Server.Model
		}
		tasks[i] = Task{RolloutID: t.RolloutID, Seal: Sealer(sc.Seal), Run: func(ctx context.Context) (*agent.Result, error) {
			return agent.Run(ctx, sc.Agent, t, plan)
		}}
	}
	col := &Collector{Source: e.Source(), Writer: s.writer, InputWriter: s.inputs, Options: s.opts.consumerOptions(),
		Concurrency: s.opts.Concurrency}
	if s.opts.Faults.FlipMask {
		col.Mutate = flipMask
	}
	collected, err := col.Collect(ctx, tasks)
	if err != nil {
		return fail(res, "collect: "+err.Error())
	}
	ledger, ledgerErr := e.Ledger(ctx)
	first := -1
	for i, c := range collected {
		got := Verdict(c)
		mism := append(Compare(sc.Expect, got), CompareExplanation(sc.Expect, c.Build)...)
		if c.WriteErr != nil {
			mism = append(mism, "rollouts file: "+c.WriteErr.Error())
		}
		note := RolloutNote{RolloutID: c.RolloutID, MaskSample: got.MaskSample, Retired: c.Retired, Mismatches: mism}
		res.Rollouts = append(res.Rollouts, note)
		res.Timings.AgentMS += ms(c.AgentTime)
		res.Timings.FinalizeMS += ms(c.FinalTime)
		var fid Fidelity
		switch {
		case ledgerErr != nil:
			fid = Fidelity{Reason: ledgerErr.Error()}
		case c.FreezeErr != nil:
			fid = Fidelity{Reason: "freeze: " + c.FreezeErr.Error()}
		default:
			var rebuilt map[string]any
			if c.Build != nil {
				rebuilt = c.Build.RebuiltResponse
			}
			fid = CheckFidelity(c.Snapshot, ledger, rebuilt)
		}
		bad := len(mism) > 0 || (fid.Checked && !fid.OK())
		if i == 0 || (bad && first < 0) {
			res.Got, res.Fidelity = got, fid
			if bad {
				first = i
			}
		}
		for _, m := range mism {
			res.Mismatches = append(res.Mismatches, prefixed(len(collected), c.RolloutID, m))
		}
		if fid.Checked && !fid.OK() {
			for _, p := range fid.Problems {
				res.Mismatches = append(res.Mismatches, prefixed(len(collected), c.RolloutID, "fidelity: "+p))
			}
		}
	}
	res.Status = StatusPass
	if len(res.Mismatches) > 0 {
		res.Status = StatusFail
	}
	return res
}

func prefixed(n int, id, m string) string {
	if n == 1 {
		return m
	}
	return id + ": " + m
}

func fail(res ScenarioResult, why string) ScenarioResult {
	res.Status = StatusFail
	res.Mismatches = append(res.Mismatches, why)
	return res
}

func flipMask(rec map[string]any) {
	if m, _ := rec["mask_sample"].(bool); m {
		delete(rec, "mask_sample")
	} else {
		rec["mask_sample"] = true
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Run runs the scenarios in order and returns the result; the records file
// lies in opts.OutDir (when given). An environment that cannot run any
// scenario (Preflight) is an error before the first one, with a nil result.
func Run(ctx context.Context, scs []scenarios.Scenario, opts Options) (*RunResult, error) {
	if err := Preflight(ctx, opts); err != nil {
		return nil, err
	}
	s, err := NewSession(opts)
	if err != nil {
		return nil, err
	}
	if opts.Backend == env.External && opts.VLLMURL != "" {
		s.externalKey = externalServer(scs)
	}
	// What the process and container backends build (a binary, an image)
	// serves every scenario: a failure is one environment error, not one
	// disagreement per scenario.
	if err := s.prepare(context.WithoutCancel(ctx)); err != nil {
		closeErr := s.Close()
		return nil, errors.Join(fmt.Errorf("%w: %w", ErrEnvironment, err), closeErr)
	}
	backend := opts.Backend
	if backend == "" {
		backend = env.InProcess
	}
	r := &RunResult{Schema: ResultSchema, Backend: string(backend), StartedAt: time.Now().UTC()}
	if opts.OutDir != "" {
		r.OutDir = opts.OutDir
		r.RolloutsFile = filepath.Join(opts.OutDir, RolloutsFileName)
		r.CaptureDir = s.captureDir()
	}
	for _, sc := range scs {
		if ctx.Err() != nil {
			break
		}
		r.Scenarios = append(r.Scenarios, s.Scenario(ctx, sc))
	}
	closeErr := s.Close()
	r.FinishedAt = time.Now().UTC()
	r.WallMS = ms(r.FinishedAt.Sub(r.StartedAt))
	r.Count()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	return r, closeErr
}

// ResultFileName is the JSON result inside the out dir.
const ResultFileName = "result.json"

// WriteJSON writes the versioned JSON result atomically and durably: a
// private temp file in the same directory, synced, then renamed over path,
// so a reader (or a crash) sees the old result or the new one, never half of
// one, and concurrent writers cannot interleave in a shared temp file.
func WriteJSON(path string, r *RunResult) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode result: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write result %s: %w", path, err)
	}
	tmp := f.Name()
	_, werr := f.Write(append(b, '\n'))
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write result %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write result %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write result %s: %w", path, err)
	}
	return nil
}

// ReadJSON reads a result written by WriteJSON and checks its schema.
func ReadJSON(path string) (*RunResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r RunResult
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("decode %s: %w", path, err)
	}
	if r.Schema != ResultSchema {
		return nil, fmt.Errorf("%s: schema %q, want %q", path, r.Schema, ResultSchema)
	}
	return &r, nil
}
