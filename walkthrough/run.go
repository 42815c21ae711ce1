package walkthrough

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/harness"
	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/scenarios"
	"github.com/capbench/capbench/scenarios/agent"
)

// setup is one way of running the walkthrough: what the servers were
// started with and what the collector was given.
type setup struct {
	Serve    doctor.Serve
	GPUBytes int64
	// ServerCapture: the overlay that reached `gym env start` turns capture
	// on and opts the agent in.
	ServerCapture bool
	// CollectorCapture: the overlay reached `gym eval run`.
	CollectorCapture bool
	// Agent is the harness: Claude Code, or a custom harness that builds
	// its URLs without the training segment.
	Agent agent.Kind
	// Tools runs a task that needs a Bash tool round trip.
	Tools    bool
	Rollouts int
	// External servers (no fake is started).
	VLLMURL, ProxyURL, CaptureDir string
}

// outcome is what one run produced.
type outcome struct {
	// StartErr is vLLM refusing to start (a *gpu.StartupError inside).
	StartErr error
	Rows     []map[string]any
	// Records counts the token records the capture directory holds.
	Records int
	// Calls are the model calls each rollout's agent made; AgentErrs their
	// errors.
	Calls     []int
	AgentErrs []string
	frozen    int
}

func (o *outcome) refusal() *gpu.StartupError {
	var se *gpu.StartupError
	if errors.As(o.StartErr, &se) {
		return se
	}
	return nil
}

const (
	plainScript = "walkthrough-plain"
	toolScript  = "walkthrough-tools"
)

func scripts() []scenarios.Script {
	return []scenarios.Script{
		{Name: plainScript, Turns: []scenarios.Turn{{Content: "The answer is 4."}}},
		{Name: toolScript, Turns: []scenarios.Turn{
			{ToolCalls: []scenarios.ToolCall{{Name: "Bash", Arguments: `{"command": "ls", "description": "List files"}`}}},
			{Content: "There are two files."},
		}},
	}
}

func (s setup) server() (scenarios.Server, env.GPU, error) {
	srv := scenarios.Server{Model: s.Serve.Model, EnableAutoToolChoice: s.Serve.EnableAutoToolChoice,
		ToolCallParser: s.Serve.ToolCallParser, ChatTemplateVariant: "plain"}
	if srv.Model == "" {
		srv.Model = scenarios.DefaultModel
	}
	if s.Serve.MaxModelLen != "" {
		n, err := gpu.ParseMaxModelLen(s.Serve.MaxModelLen)
		if err != nil {
			return srv, env.GPU{}, err
		}
		srv.MaxModelLen = n
	}
	g := env.GPU{MemoryBytes: s.GPUBytes, KVCacheDType: s.Serve.KVCacheDType}
	if s.Serve.GPUMemoryUtilization != "" {
		if _, err := fmt.Sscan(s.Serve.GPUMemoryUtilization, &g.MemoryUtilization); err != nil {
			return srv, g, fmt.Errorf("--gpu-memory-utilization %s: %w", s.Serve.GPUMemoryUtilization, err)
		}
	}
	return srv, g, nil
}

// run starts the stack for s, runs its rollouts with the Claude-Code-like
// agent and collects them the way the collector would.
func run(ctx context.Context, s setup, workDir string) (*outcome, error) {
	out := &outcome{}
	srv, g, err := s.server()
	if err != nil {
		return nil, err
	}
	dir := s.CaptureDir
	if dir == "" {
		if dir, err = os.MkdirTemp(workDir, "capture-"); err != nil {
			return nil, err
		}
	}
	spec := env.Spec{Backend: env.InProcess, Server: srv, GPU: g, CaptureOff: !s.ServerCapture, CaptureDir: dir}
	if s.VLLMURL != "" || s.ProxyURL != "" {
		// Our proxy in front of a running vLLM follows the overlay; someone
		// else's proxy follows its own settings.
		spec = env.Spec{Backend: env.External, Server: srv, VLLMURL: s.VLLMURL, ProxyURL: s.ProxyURL, CaptureDir: dir,
			CaptureOff: !s.ServerCapture && s.ProxyURL == ""}
	}
	e, err := env.Start(ctx, spec)
	if err != nil {
		var se *gpu.StartupError
		if errors.As(err, &se) {
			out.StartErr = err
			return out, nil
		}
		return nil, fmt.Errorf("start the stack: %w", err)
	}
	defer e.Close()
	if err := e.SetScripts(ctx, scripts()); err != nil && !errors.Is(err, env.ErrUnsupported) {
		return nil, err
	}
	tasks := make([]harness.Task, s.Rollouts)
	results := make([]*agent.Result, s.Rollouts)
	ids := make([]string, s.Rollouts)
	tag := newTag() // runs may share a capture directory (running servers)
	for i := range tasks {
		t := agent.Target{BaseURL: e.ProxyURL(), RolloutID: fmt.Sprintf("walkthrough-%s-%d", tag, i)}
		ids[i] = t.CaptureKey()
		plan := s.plan()
		tasks[i] = harness.Task{RolloutID: t.CaptureKey(), Run: func(ctx context.Context) (*agent.Result, error) {
			r, err := agent.Run(ctx, s.Agent, t, plan)
			results[i] = r
			return r, err
		}}
	}
	if s.CollectorCapture {
		col := &harness.Collector{Source: e.Source(), Options: consumer.DefaultOptions(), Concurrency: 2}
		col.Options.Logger = discard()
		got, err := col.Collect(ctx, tasks)
		if err != nil {
			return nil, err
		}
		for _, c := range got {
			if c.Record != nil {
				out.Rows = append(out.Rows, c.Record)
			}
			if c.Snapshot != nil {
				out.frozen += len(c.Snapshot.Entries) // retired files are gone afterwards
			}
		}
	} else {
		// A collector without the overlay never calls the finalizer: rows
		// stay as the agent wrote them.
		for _, t := range tasks {
			r, err := t.Run(ctx)
			if err != nil {
				return nil, err
			}
			if r != nil && r.Record != nil {
				out.Rows = append(out.Rows, r.Record)
			}
		}
	}
	for _, r := range results {
		if r == nil {
			continue
		}
		out.Calls = append(out.Calls, len(r.Calls))
		if r.Err != nil {
			out.AgentErrs = append(out.AgentErrs, r.Err.Error())
		}
	}
	out.Records = max(countRecords(dir, ids), out.frozen)
	// Rows as a trainer reads them back: plain JSON, not the Go types
	// delivery attached.
	for i, r := range out.Rows {
		v, err := plainJSON(r)
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
		out.Rows[i], _ = v.(map[string]any)
	}
	return out, nil
}

func (s setup) plan() agent.Plan {
	p := agent.Plan{Model: s.Serve.Model, Stream: true, Attribution: agent.Unattributed, Reward: 1,
		Main: agent.Conversation{Script: plainScript, Task: "What is 2 + 2?"}}
	if p.Model == "" {
		p.Model = scenarios.DefaultModel
	}
	if s.Tools {
		p.Main = agent.Conversation{Script: toolScript, Task: "How many files are there?"}
		p.ToolResults = map[string]string{"Bash": "a.txt\nb.txt"}
		p.MaxTurns = 6
	}
	return p
}

func newTag() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// countRecords counts the record lines of the given rollouts in a capture
// directory (read only).
func countRecords(dir string, ids []string) int {
	n := 0
	for _, id := range ids {
		b, err := os.ReadFile(filepath.Join(dir, id+".tokens.jsonl"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.TrimSpace(l) != "" {
				n++
			}
		}
	}
	return n
}
