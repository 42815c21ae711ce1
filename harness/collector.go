package harness

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/capbench/capbench/capture/consumer"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/scenarios/agent"
)

// RecordWriter appends finished records durably (consumer.Writer fsyncs).
type RecordWriter interface {
	Append(rec consumer.Rollout) error
}

// Task is one rollout to collect: an agent run that yields a finished record.
type Task struct {
	RolloutID string
	Run       func(ctx context.Context) (*agent.Result, error)
	// Seal, when set, edits the finished record from its frozen capture
	// before delivery (a gate stamping the terminal call id; see Sealer).
	Seal func(rec map[string]any, snap *store.Snapshot)
}

// Collected is what the collector observed for one rollout.
type Collected struct {
	RolloutID string
	Agent     *agent.Result
	// RunErr is a failure to start the agent at all (bad plan/target).
	RunErr error
	// Snapshot is the frozen capture, read before finalize and retirement
	// (freeze is idempotent, so finalize sees the same snapshot).
	Snapshot  *store.Snapshot
	FreezeErr error
	Build     *consumer.Result
	Record    map[string]any
	// Untouched reports that delivery left the record byte-for-byte as the
	// agent (and any seal) handed it over.
	Untouched bool
	WriteErr  error
	Retired   bool
	AgentTime time.Duration
	FinalTime time.Duration
}

// Collector runs rollouts with bounded concurrency, finalizes each with the
// consumer, appends the record durably and only then retires the snapshot.
type Collector struct {
	Source store.Source
	Writer RecordWriter
	// InputWriter, when set, receives each record as the agent (and any
	// seal) handed it over, before finalization rewrites it, so a run's
	// rollouts can be explained afterwards.
	InputWriter RecordWriter
	Options     consumer.Options
	Concurrency int
	// Mutate, when set, edits each finalized record before it is written
	// (used to inject a broken consumer in tests).
	Mutate func(rec map[string]any)
	mu     sync.Mutex
}

// ErrNoSource is returned when the collector has no token source.
var ErrNoSource = errors.New("collector has no token source")

// ErrNoRecord is a task's RunErr when its agent run reported success but
// handed back no record to finalize.
var ErrNoRecord = errors.New("agent run returned no record")

// Collect runs every task and returns their outcomes in task order.
func (c *Collector) Collect(ctx context.Context, tasks []Task) ([]Collected, error) {
	if c.Source == nil {
		return nil, ErrNoSource
	}
	n := c.Concurrency
	if n <= 0 {
		n = 4
	}
	out := make([]Collected, len(tasks))
	sem := make(chan struct{}, n)
	var wg sync.WaitGroup
	for i, t := range tasks {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return out, ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i] = c.one(ctx, t)
		}()
	}
	wg.Wait()
	return out, ctx.Err()
}

func (c *Collector) one(ctx context.Context, t Task) Collected {
	col := Collected{RolloutID: t.RolloutID}
	start := time.Now()
	res, err := t.Run(ctx)
	col.AgentTime = time.Since(start)
	if err == nil && (res == nil || res.Record == nil) {
		// Finalizing a missing record would panic on the nil map; with nothing
		// to deliver, the rollout is a failed run, not a crash of the batch.
		err = ErrNoRecord
	}
	if err != nil {
		col.RunErr = err
		return col
	}
	col.Agent = res
	col.Snapshot, col.FreezeErr = c.Source.Freeze(ctx, t.RolloutID)

	rec := res.Record
	if t.Seal != nil && col.FreezeErr == nil {
		t.Seal(rec, col.Snapshot)
	}
	before, beforeErr := json.Marshal(rec)
	if c.InputWriter != nil {
		c.mu.Lock()
		col.WriteErr = c.InputWriter.Append(rec)
		c.mu.Unlock()
	}
	start = time.Now()
	col.Build = consumer.Finalize(ctx, rec, c.Source, c.Options)
	if c.Mutate != nil {
		c.Mutate(rec)
	}
	col.Record = rec
	// encoding/json sorts map keys, so equal records encode equally.
	after, afterErr := json.Marshal(rec)
	col.Untouched = beforeErr == nil && afterErr == nil && bytes.Equal(before, after)
	col.FinalTime = time.Since(start)

	if c.Writer != nil && col.WriteErr == nil {
		c.mu.Lock()
		col.WriteErr = c.Writer.Append(rec)
		c.mu.Unlock()
	}
	// Retire only after the record is durable, and never a masked build.
	if col.WriteErr == nil && col.Build != nil && consumer.CanRetire(col.Build) {
		col.Retired = consumer.Retire(ctx, t.RolloutID, c.Source, col.Build)
	}
	return col
}

// Verdict extracts the observed verdict from a finalized record.
func Verdict(col Collected) Got {
	g := Got{RolloutID: col.RolloutID}
	if col.Agent != nil {
		g.Calls = col.Agent.Calls
		if col.Agent.Err != nil {
			g.AgentError = col.Agent.Err.Error()
		}
	}
	if col.RunErr != nil {
		g.AgentError = col.RunErr.Error()
	}
	rec := col.Record
	if rec == nil {
		return g
	}
	g.Untouched = col.Untouched
	g.Retired = col.Retired
	g.Redundant = col.Build != nil && col.Build.Redundant
	g.Metrics = normalize(rec["_ng_token_capture"])
	if e, ok := g.Metrics["error"].(string); ok {
		g.Error = e
	}
	switch m := rec["mask_sample"].(type) {
	case nil:
		// Absent means unmasked: delivery writes the key only when true.
	case bool:
		g.MaskSample = m
	default:
		// A record a trainer cannot read as a boolean must never count as
		// trainable.
		g.MaskSample = true
		g.Error = fmt.Sprintf("mask_sample is %T %v, not a boolean; counted as masked", m, m)
	}
	return g
}

// normalize turns any JSON-able value into plain decoded JSON (maps,
// float64s), so expectations compare the same way for every producer.
func normalize(v any) map[string]any {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return map[string]any{"error": fmt.Sprintf("metrics not JSON: %v", err)}
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		return map[string]any{"error": fmt.Sprintf("metrics not an object: %v", err)}
	}
	return out
}
