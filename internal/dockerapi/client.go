// Package dockerapi is a small client of the Docker Engine HTTP API, with
// net/http only: exactly what capbench's container backends need (build a
// FROM-scratch image, a private network, containers with a published port,
// a wait for /health, logs, removal). It exists so the capbench binary does
// not link a Docker SDK, whose package init alone costs milliseconds on
// every start of every subcommand.
//
// The engine is found as the docker CLI finds it by default: DOCKER_HOST
// (unix:///path or a loopback tcp://127.0.0.1:PORT), else the socket
// /var/run/docker.sock. Only a local engine is supported: the backends
// bind-mount directories of this machine and reach published ports on
// 127.0.0.1.
package dockerapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"
)

// DefaultHost is the engine address used when DOCKER_HOST is unset.
const DefaultHost = "unix:///var/run/docker.sock"

// Errors callers test with errors.Is.
var (
	// ErrUnreachable means no engine answered at the configured address.
	ErrUnreachable = errors.New("docker engine not reachable")
	// ErrNotFound is an engine answer 404 (no such image, container, network).
	ErrNotFound = errors.New("not found")
	// ErrUnsupportedHost is a DOCKER_HOST this client cannot use.
	ErrUnsupportedHost = errors.New("unsupported Docker engine address")
)

// Client talks to one Docker engine. It holds no state besides its HTTP
// transport and is safe for concurrent use.
type Client struct {
	host string // as configured, for messages
	base string // URL prefix of every request
	http *http.Client
}

// FromEnv returns a client for the engine DOCKER_HOST names (or the default
// socket).
func FromEnv() (*Client, error) {
	if os.Getenv("DOCKER_TLS_VERIFY") != "" {
		return nil, fmt.Errorf("%w: DOCKER_TLS_VERIFY is set, but TLS to the engine is not supported: "+
			"unset it and use the engine's unix socket or a plain tcp://127.0.0.1 port", ErrUnsupportedHost)
	}
	return New(os.Getenv("DOCKER_HOST"))
}

// New returns a client for the engine at host ("unix:///path",
// "tcp://127.0.0.1:2375"; empty is DefaultHost). Nothing is dialled yet.
func New(host string) (*Client, error) {
	if host == "" {
		host = DefaultHost
	}
	u, err := url.Parse(host)
	if err != nil {
		return nil, fmt.Errorf("%w: DOCKER_HOST %q: %v", ErrUnsupportedHost, host, err)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}
	c := &Client{host: host, http: &http.Client{Transport: tr}}
	switch u.Scheme {
	case "unix":
		path := u.Path
		if path == "" {
			return nil, fmt.Errorf("%w: DOCKER_HOST %q names no socket path (want unix:///var/run/docker.sock)", ErrUnsupportedHost, host)
		}
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", path)
		}
		// The host part of the URL is never dialled; the engine ignores it.
		c.base = "http://docker"
	case "tcp", "http":
		h := u.Hostname()
		if !isLoopback(h) {
			return nil, fmt.Errorf("%w: DOCKER_HOST %q is not on this machine: capbench bind-mounts local directories "+
				"and reaches published ports on 127.0.0.1, so it needs a local engine (unix:///var/run/docker.sock "+
				"or tcp://127.0.0.1:PORT)", ErrUnsupportedHost, host)
		}
		if u.Port() == "" {
			return nil, fmt.Errorf("%w: DOCKER_HOST %q names no port (want tcp://127.0.0.1:2375)", ErrUnsupportedHost, host)
		}
		c.base = "http://" + u.Host
	default:
		return nil, fmt.Errorf("%w: DOCKER_HOST %q: scheme %q is not supported (want unix:///path or tcp://127.0.0.1:PORT)",
			ErrUnsupportedHost, host, u.Scheme)
	}
	return c, nil
}

func isLoopback(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Host is the engine address as configured (for messages).
func (c *Client) Host() string { return c.host }

// PublishIP is the host address containers' ports are published on and
// reached at: the engine runs on this machine.
func (c *Client) PublishIP() string { return "127.0.0.1" }

// Close drops idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// APIError is an engine answer other than success.
type APIError struct {
	Op      string // what was asked, e.g. "create container from capbench-e2e:1"
	Status  int
	Message string // the engine's own words
}

func (e *APIError) Error() string {
	return fmt.Sprintf("docker: %s: %s (HTTP %d)", e.Op, e.Message, e.Status)
}

// Is makes errors.Is(err, ErrNotFound) true for a 404.
func (e *APIError) Is(target error) bool {
	return target == ErrNotFound && e.Status == http.StatusNotFound
}

// request sends one API call. body, when not nil, is sent as JSON unless it
// is an io.Reader (sent as is with contentType). The caller closes the
// response body; a non-2xx answer is returned as an *APIError.
func (c *Client) request(ctx context.Context, op, method, path string, query url.Values, body any, contentType string) (*http.Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case io.Reader:
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return nil, fmt.Errorf("docker: %s: encode request: %w", op, err)
		}
		rd = bytes.NewReader(raw)
		contentType = "application/json"
	}
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("docker: %s: %w", op, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.transportError(op, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, &APIError{Op: op, Status: resp.StatusCode, Message: errorMessage(resp.Body)}
	}
	return resp, nil
}

// transportError says what to do when the engine cannot be reached at all.
func (c *Client) transportError(op string, err error) error {
	var op2 *net.OpError
	if !errors.As(err, &op2) || op2.Op != "dial" {
		return fmt.Errorf("docker: %s: %w", op, err)
	}
	hint := "start it (`sudo systemctl start docker` or `dockerd`), or point DOCKER_HOST at a running engine"
	if errors.Is(err, syscall.EACCES) {
		hint = "this user may not open the socket: run as root or join the docker group"
	}
	// The dial error alone: the URL around it names a host that is never dialled.
	return fmt.Errorf("%w at %s: %w; %s", ErrUnreachable, c.host, op2, hint)
}

// errorMessage reads the engine's {"message": ...} error body.
func errorMessage(r io.Reader) string {
	raw, _ := io.ReadAll(io.LimitReader(r, 64<<10))
	var m struct {
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &m) == nil && m.Message != "" {
		return m.Message
	}
	if s := strings.TrimSpace(string(raw)); s != "" {
		return s
	}
	return "no error message"
}

// call sends a request and decodes a JSON answer into out (nil discards it).
func (c *Client) call(ctx context.Context, op, method, path string, query url.Values, body, out any) error {
	resp, err := c.request(ctx, op, method, path, query, body, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("docker: %s: decode answer: %w", op, err)
	}
	return nil
}

// Ping checks that the engine answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.call(ctx, "ping", http.MethodGet, "/_ping", nil, nil, nil)
}

// Info is the part of GET /info capbench reads.
type Info struct {
	ServerVersion string
	// Runtimes maps runtime names ("runc", "nvidia") to their settings.
	Runtimes map[string]json.RawMessage
}

// Info describes the engine.
func (c *Client) Info(ctx context.Context) (Info, error) {
	var info Info
	err := c.call(ctx, "info", http.MethodGet, "/info", nil, nil, &info)
	return info, err
}
