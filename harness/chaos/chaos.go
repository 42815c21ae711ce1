// Package chaos attacks a running capture stack and counts what survives:
// kill -9 of `capbench proxy` under load, two proxies on one directory, a
// capture disk that fills, every upstream fault the fake vLLM can inject, a
// flood of idle clients, and a memory and descriptor watch over many calls.
//
// Each scenario drives real `capbench proxy` processes in front of an
// in-process fake vLLM (both built with harness/env), keeps the id of every
// reply a client accepted, and afterwards reads the capture directory:
// every acknowledged call must be stored exactly once with the engine's
// tokens, or its rollout must be masked. The CI suite runs a bounded form;
// `capbench chaos` runs the same scenarios for longer (docs/chaos.md).
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// ResultVersion is the version of Result's JSON form.
const ResultVersion = 1

// Config sizes the scenarios. Zero fields take the bounded (CI) defaults.
type Config struct {
	// Binary is the capbench executable the proxies run (required).
	Binary string
	// Dir holds the capture directories; empty means a temp dir.
	Dir string
	// Concurrency is the number of concurrent callers (default 8).
	Concurrency int
	// Duration is the load time of each timed scenario (default 3 s).
	Duration time.Duration
	// Kills is how many times the proxy is killed with SIGKILL (default 3).
	Kills int
	// WatchCalls is the number of calls of the memory watch (default 1500).
	WatchCalls int
	// FloodConns is the number of idle connections of the flood (default 1100).
	FloodConns int
	// BodyBytes is the size of each body of the big-bodies scenario
	// (default 4 MiB).
	BodyBytes int64
	// TmpfsBytes sizes the tmpfs that fills (default 2 MiB).
	TmpfsBytes int64
	// RequireTmpfs turns "cannot mount a tmpfs here" into an error instead
	// of a skipped row (CI sets it).
	RequireTmpfs bool
	// Log receives the proxies' output; nil discards it.
	Log io.Writer
}

func (c Config) withDefaults() (Config, error) {
	if c.Binary == "" {
		return c, errors.New("chaos: the capbench binary is required")
	}
	for _, f := range []struct {
		flag string
		neg  bool
		v    any
	}{
		{"--concurrency", c.Concurrency < 0, c.Concurrency}, {"--duration", c.Duration < 0, c.Duration},
		{"--kills", c.Kills < 0, c.Kills}, {"--calls", c.WatchCalls < 0, c.WatchCalls},
		{"--flood-conns", c.FloodConns < 0, c.FloodConns}, {"--tmpfs-bytes", c.TmpfsBytes < 0, c.TmpfsBytes},
		{"--body-bytes", c.BodyBytes < 0, c.BodyBytes},
	} {
		if f.neg {
			return c, fmt.Errorf("chaos: %s %v is negative", f.flag, f.v)
		}
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.Concurrency, 8)
	def(&c.Kills, 3)
	def(&c.WatchCalls, 1500)
	def(&c.FloodConns, 1100)
	if c.Duration == 0 {
		c.Duration = 3 * time.Second
	}
	if c.BodyBytes == 0 {
		c.BodyBytes = 4 << 20
	}
	if c.TmpfsBytes == 0 {
		c.TmpfsBytes = 2 << 20
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c, nil
}

// Row is one scenario's outcome; reports.Chaos renders the table.
type Row struct {
	Scenario string `json:"scenario"`
	Load     string `json:"load"`
	Faults   string `json:"faults"`
	// Tried counts the calls sent; Acknowledged those a client accepted
	// (a 200 with a complete reply).
	Tried        int `json:"inputs_tried"`
	Acknowledged int `json:"acknowledged"`
	// Stored counts acknowledged calls with exactly one record.
	Stored int `json:"stored"`
	// Lost counts acknowledged calls without a record in a rollout that is
	// not masked: a sample the trainer would use with a call missing.
	Lost int `json:"lost"`
	// Corrupt counts records that differ from the engine's ground truth,
	// duplicates, and unreadable rollouts.
	Corrupt int `json:"corrupt"`
	// Masked counts acknowledged calls whose rollout is marked incomplete
	// (mask_sample: the trainer drops it).
	Masked       int   `json:"masked"`
	PeakRSSBytes int64 `json:"peak_rss_bytes"`
	// PeerPeakRSSBytes is the peak of the run this one is compared with
	// side by side (big bodies: a budget that admits every body at once).
	PeerPeakRSSBytes int64  `json:"peer_peak_rss_bytes,omitempty"`
	Notes            string `json:"notes,omitempty"`
	// Usage is the watch's before/peak/after figures.
	Usage *Usage `json:"usage,omitempty"`
	// Skipped, when set, says why the scenario could not run here.
	Skipped string `json:"skipped,omitempty"`
}

// Usage is a proxy's resident memory and open descriptors before the load,
// at its peak and after the callers have gone.
type Usage struct {
	RSSBefore int64 `json:"rss_before_bytes"`
	RSSAfter  int64 `json:"rss_after_bytes"`
	FDsBefore int   `json:"fds_before"`
	FDsPeak   int   `json:"fds_peak"`
	FDsAfter  int   `json:"fds_after"`
}

// Result is a whole chaos run.
type Result struct {
	Version int   `json:"version"`
	Rows    []Row `json:"rows"`
}

// Validate checks the configuration once, before any scenario starts.
func (c Config) Validate() error {
	_, err := c.withDefaults()
	return err
}

// Scenario is one attack.
type Scenario struct {
	Name string
	Run  func(ctx context.Context, cfg Config) (Row, error)
}

// Scenarios lists every attack, in the order Run performs them.
func Scenarios() []Scenario {
	return []Scenario{
		{"kill-9", KillUnderLoad},
		{"two-proxies", TwoProxies},
		{"full-disk", FullDisk},
		{"upstream-faults", UpstreamFaults},
		{"slow-clients", SlowClientFlood},
		{"big-bodies", BigBodies},
		{"watch", Watch},
	}
}

// Run performs every scenario; progress, when not nil, gets each row as it
// is done. A scenario that errors stops the run.
func Run(ctx context.Context, cfg Config, progress func(Row)) (Result, error) {
	res := Result{Version: ResultVersion}
	for _, s := range Scenarios() {
		row, err := s.Run(ctx, cfg)
		if err != nil {
			return res, fmt.Errorf("chaos scenario %s: %w", s.Name, err)
		}
		res.Rows = append(res.Rows, row)
		if progress != nil {
			progress(row)
		}
	}
	return res, nil
}

// scratch makes a fresh directory under cfg.Dir (or the temp dir).
func scratch(cfg Config, name string) (string, func(), error) {
	dir, err := os.MkdirTemp(cfg.Dir, "capbench-chaos-"+name+"-")
	if err != nil {
		return "", nil, fmt.Errorf("scratch dir: %w", err)
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}
