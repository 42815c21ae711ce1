package driver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/capbench/capbench/bench"
	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

// subagentCalls is the sub-agent conversation's length: one tool call and
// its answer.
const subagentCalls = 2

const sessionScript = "bench-session"

// DefaultSessions is a Claude-Code-shaped rollout whose prompt grows past
// 32k tokens: 16 Bash turns returning ~2k tokens each, one sub-agent, the
// CLI's max_tokens of 32000 and a think time between turns.
func DefaultSessions() bench.SessionSpec {
	return bench.SessionSpec{Sessions: 8, Concurrency: 4, Turns: 17, ToolTokens: 2000, MaxTokens: 32000,
		ThinkTime: 20 * time.Millisecond, SubAgentTurn: 3}
}

func validateSessions(s bench.SessionSpec) error {
	switch {
	case s.Sessions < 1:
		return fmt.Errorf("--sessions must be at least 1, got %d", s.Sessions)
	case s.Concurrency < 1:
		return fmt.Errorf("--concurrency must be at least 1 session, got %d", s.Concurrency)
	case s.Turns < 2:
		return fmt.Errorf("--turns must be at least 2 (a tool turn and an answer), got %d", s.Turns)
	case s.ToolTokens < 1 || s.MaxTokens < 1:
		return fmt.Errorf("--tool-tokens and --max-tokens must be positive")
	case s.SubAgentTurn >= s.Turns-1:
		return fmt.Errorf("--subagent-turn %d must come before the last turn (%d)", s.SubAgentTurn, s.Turns-1)
	}
	return nil
}

func sessionScripts(s bench.SessionSpec) []scenarios.Script {
	main := scenarios.Script{Name: sessionScript}
	for t := range s.Turns - 1 {
		call := scenarios.ToolCall{Name: "Bash", Arguments: fmt.Sprintf(`{"command": "cat part%d.txt", "description": "Read part %d"}`, t, t)}
		if s.SubAgentTurn > 0 && t == s.SubAgentTurn {
			call = scenarios.ToolCall{Name: "Agent", Arguments: `{"description": "Check the build", "prompt": "Run the build and report what it prints."}`}
		}
		main.Turns = append(main.Turns, scenarios.Turn{ToolCalls: []scenarios.ToolCall{call}})
	}
	main.Turns = append(main.Turns, scenarios.Turn{Content: "All parts read; the task is done."})
	sub := scenarios.Script{Name: sessionScript + ".sub", Turns: []scenarios.Turn{
		{ToolCalls: []scenarios.ToolCall{{Name: "Bash", Arguments: `{"command": "make", "description": "Build"}`}}},
		{Content: "The build printed ok."},
	}}
	return []scenarios.Script{main, sub}
}

func sessionPlan(model string, s bench.SessionSpec) agent.Plan {
	var b strings.Builder
	for i := range s.ToolTokens {
		b.WriteString(promptWord(i))
		b.WriteByte(' ')
	}
	p := agent.Plan{
		Model: model, Stream: true, Attribution: agent.Delivered, Reward: 1, MaxTurns: s.Turns + 1,
		Main:        agent.Conversation{Script: sessionScript, Task: "Read every part of the report and summarise it.", MaxTokens: s.MaxTokens},
		ToolResults: map[string]string{"Bash": b.String()},
	}
	if s.SubAgentTurn > 0 {
		p.SubAgent = &agent.SubAgent{Tool: "Agent", Conversation: agent.Conversation{
			Script: sessionScript + ".sub", Task: "Run the build and report what it prints.", MaxTokens: s.MaxTokens,
			System: "You are a sub-agent. Do the task you are given and report back in one sentence."}}
	}
	return p
}

var sessionWords = strings.Fields("line data value result check file test output step item")

func promptWord(i int) string { return sessionWords[(i*7+i/3)%len(sessionWords)] }

// runSessions runs agent sessions through the capture proxy, Concurrency at a
// time; each is consumed at its end (collector: freeze, finalize, retire) and
// its capture compared with the fake's ledger.
func runSessions(ctx context.Context, o Options, st *stack, client *http.Client, base time.Time) (*bench.LoadOutcome, *bench.Sessions, error) {
	spec := o.Config.Sessions
	if spec == nil {
		return nil, nil, errors.New("sessions workload without a session spec")
	}
	if err := validateSessions(*spec); err != nil {
		return nil, nil, err
	}
	if st.env == nil || st.proxy == "" {
		return nil, nil, errors.New("agent sessions need the embedded stack or --proxy-url with --capture-dir (they are consumed from the capture store)")
	}
	if err := st.env.SetScripts(ctx, sessionScripts(*spec)); err != nil {
		return nil, nil, fmt.Errorf("sessions need a fake vLLM that takes scripts: %w", err)
	}
	model := scenarios.DefaultModel
	if g := o.Config.GPU; g != nil && g.Profile != "" {
		model = g.Profile
	}
	plan := sessionPlan(model, *spec)
	col := &harness.Collector{Source: st.env.Source(), Options: consumerOptions(), Concurrency: 1}
	out := &bench.LoadOutcome{Base: base, Started: base}
	prefix := "bench-s" + time.Now().UTC().Format("150405")
	if !o.StartAt.IsZero() {
		// Shards of one run share the prefix; session i is theirs alone.
		prefix = "bench-s" + o.StartAt.UTC().Format("150405")
		var err error
		if out, err = bench.StartClock(ctx, o.StartAt); err != nil {
			return nil, nil, err
		}
		base = out.Base
	}
	stage := bench.StageInfo{Shape: bench.Shape{Arrival: bench.Closed, Concurrency: spec.Concurrency}, StartNS: time.Since(base).Nanoseconds()}
	sess := &bench.Sessions{MaskReasons: map[string]int{}}
	// Session i runs on shard i mod N, which has its share of the workers.
	var (
		mu   sync.Mutex
		next = o.Shard.Index
		ran  int
		wg   sync.WaitGroup
	)
	for range o.Shard.Share(spec.Concurrency) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next += max(o.Shard.Total, 1)
				if i < spec.Sessions {
					ran++
				}
				mu.Unlock()
				if i >= spec.Sessions {
					return
				}
				id := fmt.Sprintf("%s-%d", prefix, i)
				samples, oc := oneSession(ctx, st, col, client, plan, *spec, id, base)
				mu.Lock()
				out.Samples = append(out.Samples, samples...)
				sess.Outcomes = append(sess.Outcomes, oc)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	stage.EndNS, stage.Jobs = time.Since(base).Nanoseconds(), ran
	out.Stages = []bench.StageInfo{stage}
	out.Interrupted = ctx.Err() != nil
	for i := range out.Samples {
		out.Samples[i].Seq = i
	}
	for _, oc := range sess.Outcomes {
		sess.Count++
		if oc.Masked {
			sess.Masked++
			sess.MaskReasons[oc.MaskReason]++
		}
	}
	return out, sess, nil
}

func oneSession(ctx context.Context, st *stack, col *harness.Collector, client *http.Client, plan agent.Plan, spec bench.SessionSpec, id string, base time.Time) ([]bench.Sample, bench.SessionOutcome) {
	rec := &recorder{rt: client.Transport, base: base, think: spec.ThinkTime, session: id}
	c := &http.Client{Transport: rec}
	start := time.Now()
	task := harness.Task{RolloutID: id, Run: func(ctx context.Context) (*agent.Result, error) {
		return agent.Run(ctx, agent.ClaudeCode, agent.Target{BaseURL: st.proxy, RolloutID: id, Client: c}, plan)
	}}
	got, err := col.Collect(ctx, []harness.Task{task})
	oc := bench.SessionOutcome{RolloutID: id, DurationS: time.Since(start).Seconds()}
	samples := rec.done()
	if err != nil && len(got) == 0 {
		oc.Error = err.Error()
		return samples, oc
	}
	cd := got[0]
	v := harness.Verdict(cd)
	oc.Masked, oc.Error = v.MaskSample, v.AgentError
	if oc.Masked {
		oc.MaskReason = maskReason(v)
	}
	if cd.Snapshot != nil {
		entries := cd.Snapshot.Entries
		oc.Calls = len(entries)
		for _, e := range entries {
			oc.MaxPromptTokens = max(oc.MaxPromptTokens, len(e.PromptTokenIDs))
		}
		ok := 0
		for i := range samples {
			if samples[i].OK() {
				ok++
			}
		}
		if ok == len(entries) { // one record per served call, in call order
			k := 0
			for i := range samples {
				if samples[i].OK() {
					samples[i].PromptTokens, samples[i].OutputTokens = len(entries[k].PromptTokenIDs), len(entries[k].GenerationTokenIDs)
					samples[i].TokenSource = "capture"
					k++
				}
			}
		}
		if ledger, err := st.source.ledger(ctx); err == nil {
			f := harness.CheckFidelity(cd.Snapshot, ledger, cd.Record)
			oc.FidelityCalls, oc.FidelityExact = f.Calls, f.Matched
			if !f.OK() && oc.Error == "" && len(f.Problems) > 0 {
				oc.Error = "fidelity: " + f.Problems[0]
			}
		}
	} else if cd.FreezeErr != nil {
		oc.Error = "freeze: " + cd.FreezeErr.Error()
	}
	return samples, oc
}

// recorder times every model call of one session and holds the think time
// before each call after the first.
type recorder struct {
	rt      http.RoundTripper
	base    time.Time
	think   time.Duration
	session string
	mu      sync.Mutex
	calls   int
	samples []*bench.Sample
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPost {
		return r.rt.RoundTrip(req)
	}
	r.mu.Lock()
	n := r.calls
	r.calls++
	s := &bench.Sample{Path: bench.PathProxy, Phase: bench.PhaseMeasure, Session: r.session, Turn: n, RolloutID: r.session}
	r.samples = append(r.samples, s)
	r.mu.Unlock()
	if n > 0 && r.think > 0 {
		t := time.NewTimer(r.think)
		select {
		case <-t.C:
		case <-req.Context().Done():
			t.Stop()
		}
	}
	s.StartNS = time.Since(r.base).Nanoseconds()
	s.ScheduledNS = s.StartNS
	resp, err := r.rt.RoundTrip(req)
	if err != nil {
		s.EndNS = time.Since(r.base).Nanoseconds()
		s.ErrorKind, s.Error = bench.ErrConnect, err.Error()
		return nil, err
	}
	s.Status = resp.StatusCode
	if resp.StatusCode >= 400 {
		s.ErrorKind, s.Error = bench.ErrHTTP4xx, resp.Status
		if resp.StatusCode >= 500 {
			s.ErrorKind = bench.ErrHTTP5xx
		}
	}
	resp.Body = &timedBody{ReadCloser: resp.Body, s: s, base: r.base}
	return resp, nil
}

func (r *recorder) done() []bench.Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]bench.Sample, len(r.samples))
	for i, s := range r.samples {
		out[i] = *s
		if out[i].EndNS == 0 {
			out[i].EndNS = out[i].StartNS
		}
	}
	return out
}

// timedBody notes the first byte (the first SSE event: vLLM bench's TTFT
// for the Messages API) and the end of the reply.
type timedBody struct {
	io.ReadCloser
	s    *bench.Sample
	base time.Time
	end  bool
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && b.s.FirstTokenNS == 0 {
		b.s.FirstTokenNS = time.Since(b.base).Nanoseconds()
	}
	if err != nil && !b.end {
		b.end = true
		b.s.EndNS = time.Since(b.base).Nanoseconds()
		if !errors.Is(err, io.EOF) && b.s.ErrorKind == "" {
			b.s.ErrorKind, b.s.Error = bench.ErrStream, err.Error()
		}
	}
	return n, err
}

func (b *timedBody) Close() error {
	if !b.end {
		b.end = true
		b.s.EndNS = time.Since(b.base).Nanoseconds()
	}
	return b.ReadCloser.Close()
}

// maskReason names why the consumer masked a rollout: its error, else the
// build notes that decide masking (docs/bench-results.md).
func maskReason(g harness.Got) string {
	if g.Error != "" {
		return g.Error
	}
	m := g.Metrics
	var parts []string
	if ta, ok := m["terminal_attribution"].(map[string]any); ok {
		if c, _ := ta["chain"].(string); c != "delivered" {
			parts = append(parts, fmt.Sprintf("terminal chain %q", c))
		}
	}
	for _, k := range []string{"roots", "chains"} {
		if v, ok := m[k].(float64); ok && v != 1 {
			parts = append(parts, fmt.Sprintf("%s=%g", k, v))
		}
	}
	for _, k := range []string{"unresolved_parent_calls", "unresolved_retries"} {
		if v, ok := m[k].(float64); ok && v > 0 {
			parts = append(parts, fmt.Sprintf("%s=%g", k, v))
		}
	}
	if len(parts) == 0 {
		return "masked (no build note explains it)"
	}
	return strings.Join(parts, ", ")
}
