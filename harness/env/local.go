package env

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/scenarios"
)

// local is an environment whose proxy and store live in this process; the
// model server is an in-process fake, a fake process, or an external URL.
type local struct {
	backend  Backend
	fake     *vllm.Server // in-process fake, or nil
	fakeHTTP *fakeClient  // fake reached over HTTP, or nil (real vLLM)
	vllmURL  string
	proxy    *proxy.Proxy
	store    *store.FileStore
	tmpDir   string
	closers  []func() error
}

func (l *local) Backend() Backend     { return l.backend }
func (l *local) ProxyURL() string     { return l.proxy.URL() }
func (l *local) VLLMURL() string      { return l.vllmURL }
func (l *local) Source() store.Source { return l.store }
func (l *local) DeleteRollout(ctx context.Context, id string) error {
	return l.store.Delete(ctx, id)
}

func (l *local) SetScripts(ctx context.Context, scripts []scenarios.Script) error {
	if l.fake != nil {
		for _, sc := range scripts {
			vs, err := toFakeScript(sc)
			if err != nil {
				return err
			}
			if err := l.fake.SetScript(vs); err != nil {
				return fmt.Errorf("set script %s: %w", sc.Name, err)
			}
		}
		return nil
	}
	if l.fakeHTTP != nil {
		return l.fakeHTTP.setScripts(ctx, scripts)
	}
	return fmt.Errorf("%w: scripts need a fake vLLM", ErrUnsupported)
}

func (l *local) Ledger(ctx context.Context) ([]LedgerEntry, error) {
	if l.fake != nil {
		src := l.fake.Ledger()
		out := make([]LedgerEntry, len(src))
		for i, e := range src {
			out[i] = LedgerEntry{Seq: e.Seq, RequestID: e.RequestID, Model: e.Model, PromptTokenIDs: e.PromptTokenIDs,
				GeneratedTokenIDs: e.GeneratedTokenIDs, LogProbs: e.LogProbs, FinishReason: e.FinishReason, Text: e.Text}
		}
		return out, nil
	}
	if l.fakeHTTP != nil {
		return l.fakeHTTP.ledger(ctx)
	}
	return nil, fmt.Errorf("%w: no ledger without a fake vLLM", ErrUnsupported)
}

func (l *local) Close() error {
	var errs []error
	for i := len(l.closers) - 1; i >= 0; i-- {
		errs = append(errs, l.closers[i]())
	}
	if l.tmpDir != "" {
		errs = append(errs, os.RemoveAll(l.tmpDir))
	}
	return errors.Join(errs...)
}

// toFakeScript converts through the shared JSON form, so the catalog never
// depends on the fake's Go types.
func toFakeScript(sc scenarios.Script) (vllm.Script, error) {
	var out vllm.Script
	b, err := json.Marshal(sc)
	if err != nil {
		return out, fmt.Errorf("encode script %s: %w", sc.Name, err)
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return out, fmt.Errorf("convert script %s: %w", sc.Name, err)
	}
	return out, nil
}

// captureDir returns spec.CaptureDir or a fresh temp dir (removed on Close).
func (l *local) captureDir(spec Spec) (string, error) {
	if spec.CaptureDir != "" {
		if err := os.MkdirAll(spec.CaptureDir, 0o755); err != nil {
			return "", fmt.Errorf("capture dir: %w", err)
		}
		return spec.CaptureDir, nil
	}
	dir, err := os.MkdirTemp("", "capbench-capture-")
	if err != nil {
		return "", fmt.Errorf("capture dir: %w", err)
	}
	l.tmpDir = dir
	return dir, nil
}

// startProxy opens the file store and starts an in-process proxy in front of
// upstream.
func (l *local) startProxy(ctx context.Context, spec Spec, upstream string) error {
	dir, err := l.captureDir(spec)
	if err != nil {
		return err
	}
	fs, err := store.NewFileStore(dir)
	if err != nil {
		return fmt.Errorf("open file store: %w", err)
	}
	l.store = fs
	l.closers = append(l.closers, fs.Close)
	// Without faults the proxy gets the file store itself, as `capbench
	// proxy` does; Put timing comes from the proxy (Options.OnPut).
	var st proxy.Store = withFaults(fs, spec.Faults)
	if spec.CaptureOff {
		st = nil // capture disabled: plain forwarding
	}
	px, err := proxy.New(proxy.Options{Upstream: upstream, Store: st, Logger: discardLogger(spec.Logger),
		BufferedStreams: spec.BufferedStreams, OnPut: spec.OnPut})
	if err != nil {
		return fmt.Errorf("create proxy: %w", err)
	}
	if err := px.Start(ctx); err != nil {
		return fmt.Errorf("start proxy: %w", err)
	}
	l.proxy = px
	l.closers = append(l.closers, px.Close)
	return nil
}

func fakeOptions(s scenarios.Server) vllm.Options {
	return vllm.Options{
		Model:                s.Model,
		MaxModelLen:          s.MaxModelLen,
		EnableAutoToolChoice: s.EnableAutoToolChoice,
		ToolCallParser:       s.ToolCallParser,
		ReasoningParser:      s.ReasoningParser,
		ChatTemplateVariant:  s.ChatTemplateVariant,
		Seed:                 1,
		Host:                 "127.0.0.1",
	}
}

func startInProcess(ctx context.Context, spec Spec) (_ Env, err error) {
	l := &local{backend: InProcess}
	defer func() {
		if err != nil {
			_ = l.Close()
		}
	}()
	opts := fakeOptions(spec.Server)
	opts.Logger = discardLogger(spec.Logger)
	opts.GPUMemory, opts.GPUMemoryUtilization, opts.KVCacheDType = spec.GPU.MemoryBytes, spec.GPU.MemoryUtilization, spec.GPU.KVCacheDType
	if t := spec.Fake; t != nil {
		opts.Profile, opts.Timing, opts.Lengths = t.Profile, t.Timing, t.Lengths
		opts.LedgerLimit, opts.MaxNumSeqs = t.LedgerLimit, t.MaxNumSeqs
	}
	fake, err := vllm.New(opts)
	if err != nil {
		return nil, fmt.Errorf("create fake vLLM: %w", err)
	}
	if err := fake.Start(ctx); err != nil {
		return nil, fmt.Errorf("start fake vLLM: %w", err)
	}
	l.fake, l.vllmURL = fake, fake.URL()
	l.closers = append(l.closers, fake.Close)
	if err := l.startProxy(ctx, spec, fake.URL()); err != nil {
		return nil, err
	}
	return l, nil
}
