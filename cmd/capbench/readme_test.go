package main

// The README test runs every command of every ```sh block of README.md, so
// the README cannot drift from what capbench does. README.md is the input;
// nothing here lists its commands.
//
// How a command is run:
//   - `capbench ...` and `go run ./cmd/capbench ...` run a static capbench
//     binary built once for the test; `make test` is skipped (it is the
//     suite this test belongs to).
//   - Each command runs in a fresh temp directory; absolute paths under
//     /data/ and /tmp/ are moved into one sandbox all commands share (a later
//     command reads what an earlier one wrote there, as in a shell), and
//     every port the README uses is mapped to a free loopback port.
//   - `capbench fake-vllm` and `capbench proxy` are servers: they must come up
//     (answer /health) within serverTimeout and are then stopped, unless the
//     command's comment says it "refuses", in which case it must exit
//     non-zero. A server the README starts on a port (--port N) is started
//     again, and kept running, for any later command that uses
//     127.0.0.1:N, with its own dependencies first.
//   - `verdict` and `explain` given an empty capture directory get the
//     testdata fixture gym-consumer/03-retry-middle (rollout 3-0), and a
//     missing --rollouts file gets that rollout's record.
//   - An argument naming a file or folder of the checkout (testdata/...,
//     docs/...) is given as that path in the checkout; such inputs are only
//     read.
//   - Every other command must exit 0 within commandTimeout, unless its
//     comment says it "exits 1" (a check that finds what it documents), in
//     which case it must exit with status 1.
//
// Skipped, with the reason printed: commands that need a GPU and a real
// vLLM (--backend vllm, unless CAPBENCH_GPU=1), the Claude Code CLI
// (`claude`), or a Docker engine when none answers (CI=true fails instead);
// `make ...`, `go install`, `go build` and `go test` (the test builds its own
// binary and runs under go test). Any other program, and shell syntax
// (pipes, redirections, substitutions), fails the test until its block is
// marked skipped.
//
// A block is skipped as a whole when the line right before its opening
// fence (blank lines allowed) is an HTML comment
//
//	<!-- readme-test: skip <reason> -->
//
// and the reason is printed. Use it for blocks that only illustrate.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/harness/env"
	"github.com/capbench/capbench/internal/fixtures"
)

const (
	readmePath     = "../../README.md"
	commandTimeout = 3 * time.Minute
	serverTimeout  = 30 * time.Second
)

// readmeCommand is one command line of a ```sh block.
type readmeCommand struct {
	line     int    // 1-based line in README.md
	text     string // the command as written, comment removed
	note     string // its trailing comment
	env      []string
	args     []string
	skipWhy  string // the block's readme-test skip marker, if any
	parseErr error
}

var skipMarker = regexp.MustCompile(`^<!--\s*readme-test:\s*skip\s*(.*?)\s*-->$`)

// parseReadme returns the commands of every ```sh block in order.
func parseReadme(data string) []readmeCommand {
	var out []readmeCommand
	lines := strings.Split(data, "\n")
	inBlock, marker, lastMarker := false, "", ""
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case !inBlock && strings.HasPrefix(l, "```"):
			inBlock = strings.TrimSpace(strings.TrimPrefix(l, "```")) == "sh"
			if !inBlock {
				// another language: skip to its closing fence
				for i++; i < len(lines) && !strings.HasPrefix(strings.TrimSpace(lines[i]), "```"); i++ {
				}
			}
			marker, lastMarker = lastMarker, ""
			continue
		case !inBlock:
			if m := skipMarker.FindStringSubmatch(l); m != nil {
				lastMarker = m[1]
				if lastMarker == "" {
					lastMarker = "marked skip"
				}
			} else if l != "" {
				lastMarker = ""
			}
			continue
		case strings.HasPrefix(l, "```"):
			inBlock = false
			continue
		}
		start := i
		for strings.HasSuffix(l, `\`) && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, `\`) + " " + strings.TrimSpace(lines[i])
		}
		code, note := splitComment(l)
		if code == "" {
			continue
		}
		c := readmeCommand{line: start + 1, text: code, note: note, skipWhy: marker}
		words, err := shellWords(code)
		if err != nil {
			c.parseErr = err
		}
		for len(words) > 0 && regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`).MatchString(words[0]) {
			c.env = append(c.env, words[0])
			words = words[1:]
		}
		c.args = words
		out = append(out, c)
	}
	return out
}

// splitComment cuts a trailing "# ..." comment outside quotes.
func splitComment(l string) (code, note string) {
	var quote rune
	for i, r := range l {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return strings.TrimSpace(l[:i]), strings.TrimSpace(l[i+1:])
		}
	}
	return strings.TrimSpace(l), ""
}

// shellWords splits a simple command line; pipes, redirections and
// substitutions are refused (mark such a block skipped).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	var quote rune
	have := false
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, have = r, true
		case r == ' ' || r == '\t':
			if have {
				words = append(words, cur.String())
				cur.Reset()
				have = false
			}
		case strings.ContainsRune("|&;<>$`(){}", r):
			return nil, fmt.Errorf("shell syntax %q is not run by the README test; mark the block <!-- readme-test: skip <reason> -->", r)
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if quote != 0 {
		return nil, errors.New("unterminated quote")
	}
	if have {
		words = append(words, cur.String())
	}
	return words, nil
}

// capbenchArgs returns the capbench arguments of a command, or ok=false
// when the command does not run capbench.
func (c readmeCommand) capbenchArgs() ([]string, bool) {
	a := c.args
	switch {
	case len(a) > 0 && a[0] == "capbench":
		return a[1:], true
	case len(a) > 2 && a[0] == "go" && a[1] == "run" && strings.TrimSuffix(a[2], "/") == "./cmd/capbench":
		return a[3:], true
	}
	return nil, false
}

func hasArgPair(args []string, flag, value string) bool {
	for i, a := range args {
		if a == flag+"="+value || (a == flag && i+1 < len(args) && args[i+1] == value) {
			return true
		}
	}
	return false
}

func flagValue(args []string, flag string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

func isServer(args []string) bool {
	if len(args) > 1 && args[0] == "proxy" && !strings.HasPrefix(args[1], "-") {
		return false // a subcommand such as `proxy rollout-token`
	}
	return len(args) > 0 && (args[0] == "fake-vllm" || args[0] == "proxy")
}

// skipReason says why a command is not run here, or "".
func (c readmeCommand) skipReason(ctx context.Context) string {
	if c.skipWhy != "" {
		return "marked in README.md: " + c.skipWhy
	}
	if len(c.args) > 0 && c.args[0] == "claude" {
		return "needs the Claude Code CLI (see harness/claudecode for the suite that drives it)"
	}
	if len(c.args) > 1 && c.args[0] == "make" && c.args[1] == "test" {
		return "runs the whole test suite, which this test is part of"
	}
	if len(c.args) > 1 && c.args[0] == "make" {
		return "a make target: CI runs those, not the README test"
	}
	if len(c.args) > 1 && c.args[0] == "go" && (c.args[1] == "install" || c.args[1] == "build" || c.args[1] == "test") {
		return "go " + c.args[1] + ": the README test builds its own binary and is itself run by go test"
	}
	args, _ := c.capbenchArgs()
	if hasArgPair(args, "--backend", "vllm") && os.Getenv("CAPBENCH_GPU") != "1" {
		return "needs a GPU and a local vLLM image (set CAPBENCH_GPU=1 to run it)"
	}
	if hasArgPair(args, "--backend", "container") {
		if ok, why := env.DockerUsable(ctx); !ok {
			if os.Getenv("CI") == "true" {
				Fail("CI=true and no Docker engine answers: " + why)
			}
			return "no Docker engine answers: " + why
		}
	}
	return ""
}

// readmeRun holds what the commands share: the binary, the sandbox, the port
// map and the servers kept running.
type readmeRun struct {
	binary   string
	sandbox  string
	ports    map[string]string // README port -> free port
	servers  map[string]readmeCommand
	running  map[string]*exec.Cmd
	fixtures string
	repo     string // the checkout's root, for README paths such as testdata/...
}

var loopbackPort = regexp.MustCompile(`127\.0\.0\.1:(\d+)`)

// rewrite maps ports, absolute paths (into the shared sandbox) and paths of
// the checkout (to the checkout) of one argument.
func (r *readmeRun) rewrite(a string) string {
	a = loopbackPort.ReplaceAllStringFunc(a, func(m string) string {
		return "127.0.0.1:" + r.port(strings.TrimPrefix(m, "127.0.0.1:"))
	})
	for _, abs := range []string{"/data/", "/tmp/"} {
		if strings.HasPrefix(a, abs) {
			return filepath.Join(r.sandbox, a)
		}
	}
	if r.repo != "" && !filepath.IsAbs(a) && strings.Contains(a, "/") && !strings.HasPrefix(a, "-") {
		if _, err := os.Stat(filepath.Join(r.repo, a)); err == nil {
			return filepath.Join(r.repo, a)
		}
	}
	return a
}

func (r *readmeRun) port(p string) string {
	if q, ok := r.ports[p]; ok {
		return q
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	q := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	Expect(ln.Close()).To(Succeed())
	r.ports[p] = q
	return q
}

// argv maps a command's arguments.
// A server without --port gets a free one, named by key.
func (r *readmeRun) argv(args []string, key string) []string {
	out := make([]string, 0, len(args)+2)
	for i, a := range args {
		if i > 0 && args[i-1] == "--port" {
			out = append(out, r.port(a))
			continue
		}
		if p, ok := strings.CutPrefix(a, "--port="); ok {
			out = append(out, "--port="+r.port(p))
			continue
		}
		out = append(out, r.rewrite(a))
	}
	if isServer(args) && flagValue(args, "--port") == "" {
		out = append(out, "--port", r.port("default-"+key))
	}
	return out
}

// ensureServices starts, once, the README servers a command talks to.
func (r *readmeRun) ensureServices(ctx context.Context, args []string) {
	for _, a := range args {
		for _, m := range loopbackPort.FindAllStringSubmatch(a, -1) {
			p := m[1]
			if _, up := r.running[p]; up {
				continue
			}
			srv, ok := r.servers[p]
			if !ok {
				continue
			}
			sargs, _ := srv.capbenchArgs()
			r.ensureServices(ctx, sargs)
			cmd := r.command(context.WithoutCancel(ctx), srv, r.argv(sargs, strconv.Itoa(srv.line)), r.sandbox)
			Expect(cmd.Start()).To(Succeed())
			r.running[p] = cmd
			_, err := waitHealthy(ctx, r.ports[p], cmd)
			Expect(err).NotTo(HaveOccurred(), "README line %d: %s", srv.line, srv.text)
		}
	}
}

func (r *readmeRun) command(ctx context.Context, c readmeCommand, argv []string, cwd string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, r.binary, argv...)
	if err := os.MkdirAll(cwd, 0o755); err != nil {
		Fail(err.Error())
	}
	cmd.Dir = cwd
	cmd.Env = append(os.Environ(), c.env...)
	cmd.Stdout, cmd.Stderr = GinkgoWriter, GinkgoWriter
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// waitHealthy waits until the server cmd started answers /health on port.
// The returned channel receives the server's exit, whenever it comes.
func waitHealthy(ctx context.Context, port string, cmd *exec.Cmd) (<-chan error, error) {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	deadline := time.After(serverTimeout)
	for {
		resp, err := http.Get("http://127.0.0.1:" + port + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return exited, nil
			}
		}
		select {
		case err := <-exited:
			return exited, fmt.Errorf("the server exited before answering /health: %v", err)
		case <-deadline:
			return exited, fmt.Errorf("no answer on /health within %s", serverTimeout)
		case <-ctx.Done():
			return exited, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// seed gives consumer commands the fixture capture they read.
func (r *readmeRun) seed(args []string, cwd string) {
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(cwd, p)
	}
	if len(args) == 0 || (args[0] != "verdict" && args[0] != "explain") {
		return
	}
	dir := abs(flagValue(args, "--capture-dir"))
	if dir == "" {
		return
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) == 0 {
		Expect(fixtures.CopyTree(filepath.Join(r.fixtures, "gym-consumer/03-retry-middle/capture"), dir)).To(Succeed())
	}
	if in := abs(flagValue(args, "--rollouts")); in != "" {
		if _, err := os.Stat(in); errors.Is(err, os.ErrNotExist) {
			raw, err := os.ReadFile(filepath.Join(r.fixtures, "gym-consumer/03-retry-middle/inputs/response-id.json"))
			Expect(err).NotTo(HaveOccurred())
			rec := extractRecord(raw)
			Expect(os.WriteFile(in, append(rec, '\n'), 0o644)).To(Succeed())
		}
	}
}

func (r *readmeRun) stopAll() {
	for p := range r.running {
		r.stop(p)
	}
}

// stop ends the server kept running on README port p, if any.
func (r *readmeRun) stop(p string) {
	if cmd, ok := r.running[p]; ok {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _, _ = cmd.Process.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		delete(r.running, p)
	}
}

// readmeErrata are README commands known to fail as written, each with the
// fix the README needs. Such a command must still fail (so the entry goes
// once the README is fixed), and every entry must match a README command.
var readmeErrata = map[string]string{}

var _ = Describe("every command of README.md", Ordered, Label("readme", "slow"), func() {
	raw, readErr := os.ReadFile(readmePath)
	cmds := parseReadme(string(raw))
	run := &readmeRun{ports: map[string]string{}, servers: map[string]readmeCommand{}, running: map[string]*exec.Cmd{}}
	for _, c := range cmds {
		if args, ok := c.capbenchArgs(); ok && isServer(args) && !strings.Contains(c.note, "refuses") {
			if p := flagValue(args, "--port"); p != "" && run.servers[p].text == "" {
				run.servers[p] = c
			}
		}
	}

	BeforeAll(func(ctx SpecContext) {
		if testing.Short() {
			Skip("-short: the README test builds the binary and runs every README command")
		}
		Expect(readErr).NotTo(HaveOccurred())
		Expect(cmds).NotTo(BeEmpty(), "README.md has no ```sh blocks")
		dir, ok := fixtures.Dir()
		Expect(ok).To(BeTrue(), "the test fixtures (testdata/fixtures) are missing")
		run.fixtures = dir
		repo, err := filepath.Abs(filepath.Dir(readmePath))
		Expect(err).NotTo(HaveOccurred())
		run.repo = repo
		bin := GinkgoT().TempDir()
		b, err := env.BuildBinary(ctx, bin, true)
		Expect(err).NotTo(HaveOccurred())
		run.binary = b
		run.sandbox = GinkgoT().TempDir()
		DeferCleanup(run.stopAll)
	}, NodeTimeout(5*time.Minute))

	It("parses README.md, and every erratum still names a README command", func() {
		Expect(readErr).NotTo(HaveOccurred())
		texts := map[string]bool{}
		for _, c := range cmds {
			Expect(c.parseErr).NotTo(HaveOccurred(), "README line %d: %s", c.line, c.text)
			texts[c.text] = true
		}
		for text := range readmeErrata {
			Expect(texts).To(HaveKey(text), "README no longer has %q: delete its readmeErrata entry", text)
		}
	})

	for _, c := range cmds {
		It(fmt.Sprintf("line %d: %s", c.line, c.text), func(ctx SpecContext) {
			if why := c.skipReason(ctx); why != "" {
				fmt.Fprintf(GinkgoWriter, "skipped README line %d (%s): %s\n", c.line, c.text, why)
				Skip(why)
			}
			Expect(c.parseErr).NotTo(HaveOccurred())
			args, ok := c.capbenchArgs()
			Expect(ok).To(BeTrue(), "README line %d runs %q, which the README test does not know; mark its block <!-- readme-test: skip <reason> -->", c.line, c.args[0])
			cwd := GinkgoT().TempDir()
			if usesService(args, run.servers) {
				cwd = run.sandbox
			}
			if isServer(args) {
				// The command itself is (or replaces) the server kept on its port.
				run.stop(flagValue(args, "--port"))
			}
			run.ensureServices(ctx, args)
			mapped := run.argv(args, strconv.Itoa(c.line))
			run.seed(mapped, cwd)
			tctx, cancel := context.WithTimeout(ctx, commandTimeout)
			defer cancel()
			cmd := run.command(tctx, c, mapped, cwd)
			if isServer(args) {
				if strings.Contains(c.note, "refuses") {
					sctx, cancel := context.WithTimeout(ctx, serverTimeout)
					defer cancel()
					cmd := run.command(sctx, c, mapped, cwd)
					err := cmd.Run()
					Expect(sctx.Err()).NotTo(HaveOccurred(), "README says it refuses to start, but it kept running")
					Expect(err).To(HaveOccurred(), "README says it refuses to start")
					return
				}
				Expect(cmd.Start()).To(Succeed())
				p := flagValue(mapped, "--port")
				exited, err := waitHealthy(ctx, p, cmd)
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				// Until it has exited it may still answer on the port the
				// next command's own server must bind.
				select {
				case <-exited:
				case <-time.After(serverTimeout):
					_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
					<-exited
				}
				Expect(err).NotTo(HaveOccurred())
				return
			}
			err := cmd.Run()
			Expect(tctx.Err()).NotTo(HaveOccurred(), "README line %d did not finish within %s", c.line, commandTimeout)
			if fix, ok := readmeErrata[c.text]; ok {
				Expect(err).To(HaveOccurred(), "README line %d now works: delete its readmeErrata entry", c.line)
				fmt.Fprintf(GinkgoWriter, "README line %d fails as written, as known: %s\n", c.line, fix)
				return
			}
			if strings.Contains(c.note, "exits 1") {
				var exit *exec.ExitError
				Expect(errors.As(err, &exit)).To(BeTrue(), "README line %d says it exits 1, but it exited 0 or did not run: %v", c.line, err)
				Expect(exit.ExitCode()).To(Equal(1), "README line %d says it exits 1", c.line)
				return
			}
			Expect(err).NotTo(HaveOccurred(), "README line %d exits non-zero: %s (its output is above)", c.line, c.text)
		}, SpecTimeout(commandTimeout+serverTimeout))
	}
})

// usesService reports whether a command talks to a README server, and so
// must share its sandbox (its capture directory).
func usesService(args []string, servers map[string]readmeCommand) bool {
	for _, a := range args {
		for _, m := range loopbackPort.FindAllStringSubmatch(a, -1) {
			if _, ok := servers[m[1]]; ok {
				return true
			}
		}
	}
	return false
}

// extractRecord returns the "record" object of a gym-consumer input file as
// one JSON line.
func extractRecord(raw []byte) []byte {
	var in struct {
		Record map[string]any `json:"record"`
	}
	Expect(json.Unmarshal(raw, &in)).To(Succeed())
	Expect(in.Record).NotTo(BeEmpty())
	b, err := json.Marshal(in.Record)
	Expect(err).NotTo(HaveOccurred())
	return b
}
