// Package env builds the environments a scenario runs in: a fake vLLM (or a
// real one) behind the capture proxy, with the capture store the collector
// freezes. Backends: in-process (default), the fake as a process, fake and
// proxy as containers, a real vLLM container, and external URLs.
package env

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/scenarios"
)

// Backend names an environment kind.
type Backend string

// The backends.
const (
	InProcess Backend = "inprocess"
	Process   Backend = "process"
	Container Backend = "container"
	RealVLLM  Backend = "vllm"
	External  Backend = "external"
)

// Backends lists every backend name.
func Backends() []Backend { return []Backend{InProcess, Process, Container, RealVLLM, External} }

// ParseBackend validates a backend name.
func ParseBackend(s string) (Backend, error) {
	for _, b := range Backends() {
		if string(b) == s {
			return b, nil
		}
	}
	names := make([]string, 0, len(Backends()))
	for _, b := range Backends() {
		names = append(names, string(b))
	}
	return "", fmt.Errorf("unknown backend %q (want one of %s)", s, strings.Join(names, ", "))
}

// Errors callers test with errors.Is.
var (
	// ErrUnavailable means the backend cannot run here (no Docker, no GPU, no
	// image); the wrapped message says why. Suites turn it into a Skip.
	ErrUnavailable = errors.New("backend unavailable")
	// ErrUnsupported means the environment cannot do what a scenario needs
	// (scripts on a real vLLM, a store fault behind an external proxy).
	ErrUnsupported = errors.New("not supported by this environment")
	// ErrInvalidSpec is a bad Spec field.
	ErrInvalidSpec = errors.New("invalid environment spec")
)

// LedgerEntry is one generation the fake vLLM performed (its ground truth).
type LedgerEntry struct {
	// Seq numbers the fake's generations from 1; a ledger whose oldest Seq
	// is above 1 has dropped older ones (its bounds).
	Seq               uint64    `json:"seq,omitempty"`
	RequestID         string    `json:"request_id"`
	Model             string    `json:"model"`
	PromptTokenIDs    []int     `json:"prompt_token_ids"`
	GeneratedTokenIDs []int     `json:"generated_token_ids"`
	LogProbs          []float64 `json:"log_probs"`
	FinishReason      string    `json:"finish_reason"`
	Text              string    `json:"text"`
}

// Env is a running environment.
type Env interface {
	// Backend names the kind of environment.
	Backend() Backend
	// ProxyURL is the capture proxy's root URL (agents append
	// /ng-rollout/<id>/training-token-capture/v1/...).
	ProxyURL() string
	// VLLMURL is the model server behind the proxy.
	VLLMURL() string
	// Source is the store the collector freezes, finalizes and retires from.
	Source() store.Source
	// DeleteRollout removes stale records of a rollout id before dispatch.
	DeleteRollout(ctx context.Context, rolloutID string) error
	// SetScripts installs scripts in the fake (ErrUnsupported on a real vLLM).
	SetScripts(ctx context.Context, scripts []scenarios.Script) error
	// Ledger returns the fake's generations (ErrUnsupported on a real vLLM).
	Ledger(ctx context.Context) ([]LedgerEntry, error)
	// Close stops everything the environment started.
	Close() error
}

// StoreFaults are deliberate capture-store faults, injected between the
// proxy and the store (only where the proxy runs in this process).
type StoreFaults struct {
	// FailPut makes the n-th Put (1-based) of each rollout return an error.
	FailPut int
	// DropPut makes the n-th Put of each rollout silently succeed without
	// storing anything (a broken proxy that loses a call).
	DropPut int
}

func (f StoreFaults) any() bool { return f.FailPut > 0 || f.DropPut > 0 }

// Spec describes the environment to build.
type Spec struct {
	Backend Backend
	// Server is the vLLM configuration (flags of `vllm serve`).
	Server scenarios.Server
	// CaptureDir is where the file store lives. Required for the external
	// backend with an external proxy; elsewhere empty means a fresh temp dir.
	CaptureDir string
	// Faults are injected into the store (in-process proxies only).
	Faults StoreFaults
	// VLLMURL and ProxyURL point at running servers (external backend).
	VLLMURL  string
	ProxyURL string
	// Image is the real vLLM image (RealVLLM backend).
	Image string
	// Binary is a prebuilt capbench binary (process/container backends);
	// empty builds one with `go build` for this environment.
	Binary string
	// CapbenchImage is a prebuilt FROM-scratch capbench image (BuildImage)
	// for the container backend; empty builds one for this environment.
	CapbenchImage string
	// Logger receives the components' logs; nil discards them.
	Logger *slog.Logger
	// GPU is the fake vLLM's memory model (in-process fake only): device
	// memory in bytes (0 = off), utilization and KV dtype as vLLM's flags.
	GPU GPU
	// CaptureOff runs the in-process proxy without a store: a model server
	// whose capture is disabled forwards calls and records nothing.
	CaptureOff bool
	// Fake tunes the in-process fake beyond the server flags and GPU (the
	// bench's profile, timing model and output lengths); nil keeps the
	// scenario defaults.
	Fake *FakeTuning
	// OnPut, when set, is told how long every store Put of the in-process
	// proxy took (the durable write: append, fsync, state) and its error.
	// It is called from request goroutines.
	OnPut func(d time.Duration, err error)
	// BufferedStreams makes the in-process proxy buffer streamed replies as
	// NeMo Gym's model server does (the whole generation, then a synthetic
	// stream), so a benchmark can show what streaming pass-through buys.
	BufferedStreams bool
}

// GPU configures the fake vLLM's KV-cache memory model.
type GPU struct {
	MemoryBytes       int64
	MemoryUtilization float64
	KVCacheDType      string
}

// FakeTuning are fake vLLM settings a load test needs (in-process fake).
type FakeTuning struct {
	// Profile names the model geometry ("" = derived from the model).
	Profile     string
	Timing      vllm.Timing
	Lengths     vllm.Lengths
	LedgerLimit int
	MaxNumSeqs  int
}

// Start builds the environment described by spec.
func Start(ctx context.Context, spec Spec) (Env, error) {
	if spec.Server.Model == "" {
		spec.Server.Model = scenarios.DefaultModel
	}
	switch spec.Backend {
	case InProcess, "":
		return startInProcess(ctx, spec)
	case Process:
		return startProcess(ctx, spec)
	case Container:
		return startContainers(ctx, spec)
	case RealVLLM:
		return startRealVLLM(ctx, spec)
	case External:
		return startExternal(ctx, spec)
	}
	return nil, fmt.Errorf("%w: unknown backend %q", ErrInvalidSpec, spec.Backend)
}

func discardLogger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}
