package dockerapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Wait tunes WaitHTTP.
type Wait struct {
	// Path is probed with GET until it answers 200, e.g. "/health".
	Path string
	// Timeout bounds the whole wait (startup included).
	Timeout time.Duration
	// Interval is the pause between probes (default 100 ms).
	Interval time.Duration
}

// logLines is how much of a failed container's output errors carry.
const logLines = 50

// WaitHTTP waits until the container's published port answers GET w.Path
// with 200 and returns its base URL ("http://127.0.0.1:PORT"). It fails
// early when the container exits or does not publish its port; on failure
// the error carries the container's last lines of output.
//
// A port check alone would pass too early: Docker's port forwarder accepts
// connections before the process inside listens.
func (ctr *Container) WaitHTTP(ctx context.Context, w Wait) (string, error) {
	if ctr.port == "" {
		return "", fmt.Errorf("docker: wait for container %s: it publishes no port", ctr)
	}
	if w.Interval <= 0 {
		w.Interval = 100 * time.Millisecond
	}
	wctx, cancel := context.WithTimeout(ctx, w.Timeout)
	defer cancel()
	probe := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	last := errors.New("no probe yet: the port was not published")
	probed := false
	for {
		st, err := ctr.inspect(wctx)
		if err != nil && wctx.Err() == nil {
			return "", err
		}
		if err == nil {
			if exited(st) {
				return "", ctr.failure(ctx, fmt.Sprintf("exited with code %d%s before GET %s answered",
					st.State.ExitCode, exitNote(st), w.Path))
			}
			addr, ok, err := ctr.hostAddr(st)
			if err != nil {
				return "", ctr.withLogs(ctx, err)
			}
			if ok {
				base := "http://" + addr
				err := get(wctx, probe, base+w.Path)
				if err == nil {
					return base, nil
				}
				// A probe the deadline cut short says less than the answer
				// before it, which the error then names.
				if wctx.Err() == nil || !probed {
					last = err
				}
				probed = true
			}
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return "", fmt.Errorf("docker: wait for container %s: %w", ctr, ctx.Err())
			}
			return "", ctr.failure(ctx, fmt.Sprintf("did not answer GET %s with 200 within %s (last probe: %v)", w.Path, w.Timeout, last))
		case <-time.After(w.Interval):
		}
	}
}

func exited(st containerState) bool {
	switch st.State.Status {
	case "created", "running", "restarting", "paused":
		return false
	}
	return !st.State.Running
}

func exitNote(st containerState) string {
	switch {
	case st.State.OOMKilled:
		return " (killed: out of memory)"
	case st.State.Error != "":
		return " (" + st.State.Error + ")"
	}
	return ""
}

func get(ctx context.Context, c *http.Client, u string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

// failure is a wait error naming the container, with its output.
func (ctr *Container) failure(ctx context.Context, what string) error {
	return ctr.withLogs(ctx, fmt.Errorf("docker: container %s %s", ctr, what))
}

// withLogs appends the container's last lines of output to err.
func (ctr *Container) withLogs(ctx context.Context, err error) error {
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	out, lerr := ctr.Logs(lctx, logLines)
	if lerr != nil {
		return fmt.Errorf("%w\n(its output could not be read: %v)", err, lerr)
	}
	return fmt.Errorf("%w\nits output (last %d lines):\n%s", err, logLines, joinLines(out))
}
