package claudecode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// SettingEnv names the environment variable that enables the CLI specs: a
// path to a claude executable, or "1" for the copy installed by npm under
// testdata/npm.
const SettingEnv = "CAPBENCH_CLAUDE_CODE"

// Version is the CLI release the specs and testdata/npm/package.json pin.
const Version = "2.1.328"

var (
	// ErrNotEnabled means the setting is empty: the CLI specs are opt-in.
	ErrNotEnabled = errors.New(SettingEnv + " is not set")
	// ErrNotInstalled means the setting names no runnable executable.
	ErrNotInstalled = errors.New("claude executable not found")
)

// Executable resolves the setting to a claude executable. setting is the
// value of SettingEnv; npmDir is the directory holding package.json (its
// node_modules/.bin/claude is used for "1").
func Executable(setting, npmDir string) (string, error) {
	setting = strings.TrimSpace(setting)
	var path string
	switch setting {
	case "", "0":
		return "", ErrNotEnabled
	case "1":
		path = filepath.Join(npmDir, "node_modules", ".bin", "claude")
	default:
		path = setting
	}
	fi, err := os.Stat(path)
	if err != nil {
		hint := ""
		if setting == "1" {
			hint = "; run `npm install` in " + npmDir
		}
		return "", fmt.Errorf("%w: %s=%q: %w%s", ErrNotInstalled, SettingEnv, setting, err, hint)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%w: %s is not an executable file", ErrNotInstalled, path)
	}
	return path, nil
}

// Config is one headless run.
type Config struct {
	// Executable is the claude binary (see Executable).
	Executable string
	// BaseURL is ANTHROPIC_BASE_URL, e.g.
	// <proxy>/ng-rollout/<id>/training-token-capture.
	BaseURL string
	// Home is a fresh HOME for the run (the CLI writes its state there).
	Home string
	// Dir is the working directory the agent's tools act in.
	Dir string
	// Headers are sent with every Messages call (ANTHROPIC_CUSTOM_HEADERS).
	Headers map[string]string
	// Env adds or overrides variables (KEY=VALUE), after the defaults.
	Env []string
}

// Environ returns the run's whole environment. Only PATH, SHELL, LANG and TMPDIR
// come from the caller's environment, so no ANTHROPIC_* or CLAUDE_* setting
// of the machine can send the CLI anywhere but BaseURL.
func (c Config) Environ() []string {
	var env []string
	for _, k := range []string{"PATH", "SHELL", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	env = append(env,
		"HOME="+c.Home,
		"ANTHROPIC_BASE_URL="+c.BaseURL,
		"ANTHROPIC_API_KEY=dummy",
		"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1",
		"DISABLE_TELEMETRY=1",
		"DISABLE_AUTOUPDATER=1",
	)
	if len(c.Headers) > 0 {
		names := make([]string, 0, len(c.Headers))
		for k := range c.Headers {
			names = append(names, k)
		}
		sort.Strings(names)
		lines := make([]string, len(names))
		for i, k := range names {
			lines[i] = k + ": " + c.Headers[k]
		}
		// The CLI splits ANTHROPIC_CUSTOM_HEADERS on newlines.
		env = append(env, "ANTHROPIC_CUSTOM_HEADERS="+strings.Join(lines, "\n"))
	}
	return append(env, c.Env...)
}

// Command builds `claude -p prompt --output-format json args...`.
func (c Config) Command(ctx context.Context, prompt string, args ...string) *exec.Cmd {
	argv := append([]string{"-p", prompt, "--output-format", "json"}, args...)
	cmd := exec.CommandContext(ctx, c.Executable, argv...)
	cmd.Dir = c.Dir
	cmd.Env = c.Environ()
	return cmd
}

// Result is the JSON object `--output-format json` prints.
type Result struct {
	Type              string            `json:"type"`
	Subtype           string            `json:"subtype"`
	IsError           bool              `json:"is_error"`
	Result            string            `json:"result"`
	NumTurns          int               `json:"num_turns"`
	SessionID         string            `json:"session_id"`
	PermissionDenials []json.RawMessage `json:"permission_denials"`
	Usage             map[string]any    `json:"usage"`
}

// ErrNoResult means stdout held no JSON result object.
var ErrNoResult = errors.New("no JSON result on stdout")

// ParseResult decodes the last JSON object line of stdout.
func ParseResult(stdout []byte) (*Result, error) {
	lines := bytes.Split(bytes.TrimSpace(stdout), []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		line := bytes.TrimSpace(lines[i])
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var r Result
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoResult, err)
		}
		if r.Type != "result" {
			return nil, fmt.Errorf("%w: last object has type %q", ErrNoResult, r.Type)
		}
		return &r, nil
	}
	return nil, ErrNoResult
}
