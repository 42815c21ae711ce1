package env

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/capbench/capbench/scenarios"
)

// fakeClient talks to a fake vLLM's control endpoints over HTTP.
type fakeClient struct {
	base   string
	client *http.Client
}

func newFakeClient(base string) *fakeClient {
	return &fakeClient{base: strings.TrimRight(base, "/"), client: &http.Client{Timeout: 30 * time.Second}}
}

func (f *fakeClient) setScripts(ctx context.Context, scripts []scenarios.Script) error {
	for _, sc := range scripts {
		body, err := json.Marshal(sc)
		if err != nil {
			return fmt.Errorf("encode script %s: %w", sc.Name, err)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPut, f.base+"/fake/scripts/"+url.PathEscape(sc.Name), bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := f.client.Do(req)
		if err != nil {
			return fmt.Errorf("put script %s: %w", sc.Name, err)
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%w: %s has no /fake/scripts endpoint (not a fake vLLM?)", ErrUnsupported, f.base)
		}
		if resp.StatusCode/100 != 2 {
			return fmt.Errorf("put script %s: HTTP %d: %s", sc.Name, resp.StatusCode, strings.TrimSpace(string(msg)))
		}
	}
	return nil
}

func (f *fakeClient) ledger(ctx context.Context) ([]LedgerEntry, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.base+"/fake/ledger", nil)
	if err != nil {
		return nil, err
	}
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get ledger: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %s has no /fake/ledger endpoint", ErrUnsupported, f.base)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get ledger: HTTP %d", resp.StatusCode)
	}
	var out []LedgerEntry
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode ledger: %w", err)
	}
	return out, nil
}

// waitHealthy polls GET url until it answers 2xx or ctx ends.
func waitHealthy(ctx context.Context, u string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := &http.Client{Timeout: 2 * time.Second}
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			last = fmt.Errorf("HTTP %d", resp.StatusCode)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not healthy: %w (last: %v)", u, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
