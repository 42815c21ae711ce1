package env

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/scenarios"
)

// remote is an environment whose proxy runs elsewhere (an external proxy or
// a container); this process only shares its capture directory.
type remote struct {
	backend  Backend
	proxyURL string
	vllmURL  string
	fake     *fakeClient
	store    *store.FileStore
	closers  []func() error
}

func newRemote(b Backend, proxyURL, vllmURL, dir string, closers []func() error) (*remote, error) {
	fs, err := store.NewFileStore(dir)
	if err != nil {
		return nil, fmt.Errorf("open capture dir %s: %w", dir, err)
	}
	r := &remote{backend: b, proxyURL: proxyURL, vllmURL: vllmURL, store: fs, closers: append(closers, fs.Close)}
	if vllmURL != "" {
		r.fake = newFakeClient(vllmURL)
	}
	return r, nil
}

func (r *remote) Backend() Backend     { return r.backend }
func (r *remote) ProxyURL() string     { return r.proxyURL }
func (r *remote) VLLMURL() string      { return r.vllmURL }
func (r *remote) Source() store.Source { return r.store }
func (r *remote) DeleteRollout(ctx context.Context, id string) error {
	if err := r.store.Delete(ctx, id); err != nil {
		return err
	}
	if r.backend != Container {
		return nil
	}
	// The delete leaves files this (root) process created, such as the
	// rollout's lock file; the proxy container runs as uid 65534 and must
	// be able to open them.
	matches, err := filepath.Glob(filepath.Join(r.store.Dir(), globEscape(id)+".*"))
	if err != nil {
		return err
	}
	for _, m := range matches {
		if err := os.Chmod(m, 0o666); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("open %s to the proxy container: %w", m, err)
		}
	}
	return nil
}

func globEscape(s string) string {
	return strings.NewReplacer("*", `\*`, "?", `\?`, "[", `\[`, `\`, `\\`).Replace(s)
}

func (r *remote) SetScripts(ctx context.Context, scripts []scenarios.Script) error {
	if r.fake == nil {
		return fmt.Errorf("%w: no vLLM URL to install scripts on", ErrUnsupported)
	}
	return r.fake.setScripts(ctx, scripts)
}

func (r *remote) Ledger(ctx context.Context) ([]LedgerEntry, error) {
	if r.fake == nil {
		return nil, fmt.Errorf("%w: no vLLM URL to read a ledger from", ErrUnsupported)
	}
	return r.fake.ledger(ctx)
}

func (r *remote) Close() error {
	var errs []error
	for i := len(r.closers) - 1; i >= 0; i-- {
		errs = append(errs, r.closers[i]())
	}
	return errors.Join(errs...)
}
