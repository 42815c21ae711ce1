package figures

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/capbench/capbench/bench"

	"github.com/capbench/capbench/internal/loopback"
)

// Folders of a CapbenchShards run next to out/ (the merged result).
const (
	singleDir = "single"
	shardDir  = "shard-" // + index
)

// shardsDelay is how far ahead of now the shards' common --start-at lies:
// enough for every process to start and be waiting.
const shardsDelay = 2 * time.Second

// shardsShow describes the commands of a CapbenchShards run (URL and T
// are chosen when it runs; stdout.txt then lists the real lines).
func (e Exec) shardsShow(run Run, dir string) string {
	shard := append(e.benchArgv(run, "URL", filepath.Join(dir, shardDir+"I")), "--shard", fmt.Sprintf("I/%d", run.Shards), "--start-at", "T")
	return fmt.Sprintf("%s fake-vllm %s --host 127.0.0.1 --port P & then %s; then for I in 0..%d at once: %s; then %s merge --out %s %sI...",
		e.Capbench, shellJoin(run.Fake), shellJoin(e.benchArgv(run, "URL", filepath.Join(dir, singleDir))), run.Shards-1,
		shellJoin(shard), e.Capbench, filepath.Join(dir, outDir), filepath.Join(dir, shardDir))
}

func (e Exec) benchArgv(run Run, url, out string) []string {
	a := append([]string{e.Capbench, "bench", "--url", url}, run.Args...)
	a = append(a, "--progress", "off", "--metrics-url", "off")
	if out != "" {
		a = append(a, "--out", out)
	}
	return a
}

// runShards starts the fake, runs the schedule as one process, then as
// run.Shards processes started together, and merges them. Each command's
// output goes to its own log in dir.
func (e Exec) runShards(ctx context.Context, run Run, dir, cwd string) error {
	port, err := loopback.FreePort()
	if err != nil {
		return err
	}
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	fake, err := e.start(ctx, dir, "fake", cwd, append(append([]string{e.Capbench, "fake-vllm"}, run.Fake...), "--host", "127.0.0.1", "--port", strconv.Itoa(port)))
	if err != nil {
		return err
	}
	defer fake.stop()
	if err := waitHealthy(ctx, url+"/health", 30*time.Second, fake.done); err != nil {
		return fmt.Errorf("fake-vllm: %w%s", err, tail(filepath.Join(dir, "fake.log")))
	}
	if err := wait(e.start(ctx, dir, singleDir, cwd, e.benchArgv(run, url, filepath.Join(dir, singleDir)))); err != nil {
		return err
	}
	at := time.Now().Add(shardsDelay).UTC().Format(time.RFC3339Nano)
	var procs []*proc
	var errs []error
	merge := []string{e.Capbench, "merge", "--out", filepath.Join(dir, outDir)}
	for i := range run.Shards {
		name := shardDir + strconv.Itoa(i)
		argv := append(e.benchArgv(run, url, filepath.Join(dir, name)), "--shard", fmt.Sprintf("%d/%d", i, run.Shards), "--start-at", at)
		c, err := e.start(ctx, dir, name, cwd, argv)
		if err != nil {
			errs = append(errs, err)
			break
		}
		procs = append(procs, c)
		merge = append(merge, filepath.Join(dir, name))
	}
	for _, p := range procs {
		errs = append(errs, p.wait())
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return wait(e.start(ctx, dir, "merge", cwd, merge))
}

// proc is a started command whose output goes to its own log.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when it has exited; err is then set
	err  error
}

// start runs argv with its output in dir/name.log (and stdout.txt gets the
// command lines, so a reader sees the whole procedure in one place).
func (e Exec) start(ctx context.Context, dir, name, cwd string, argv []string) (*proc, error) {
	line := shellJoin(argv)
	if err := appendFile(filepath.Join(dir, stdoutFile), "$ "+line+"   # output: "+name+".log\n"); err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = cwd
	var w io.Writer = log
	if e.Echo != nil {
		w = io.MultiWriter(log, e.Echo)
	}
	cmd.Stdout, cmd.Stderr = w, w
	ownGroup(cmd, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("%s: %w", line, err)
	}
	p := &proc{cmd: cmd, log: log.Name(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// wait waits for a command start started.
func wait(p *proc, startErr error) error {
	if startErr != nil {
		return startErr
	}
	return p.wait()
}

// wait's error names the command with its last output.
func (p *proc) wait() error {
	<-p.done
	if p.err != nil {
		return fmt.Errorf("%s: %w%s", shellJoin(p.cmd.Args), p.err, tail(p.log))
	}
	return nil
}

// stop ends a server: SIGTERM, then a kill after 10 s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitHealthy polls url until it answers 200, the limit passes or the
// server exits.
func waitHealthy(ctx context.Context, url string, limit time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer 200 within %s", url, limit)
		case <-exited:
			return errors.New("it exited before answering")
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func appendFile(path, s string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = f.WriteString(s)
	return errors.Join(err, f.Close())
}

// SameSchedule reports whether the merged shards sent the single process's
// schedule: the same requests at the same offsets.
func (d Data) SameSchedule() (bool, error) {
	if d.Single == nil || d.Result == nil {
		return false, errors.New("the row has no shards run")
	}
	schedule := func(r *bench.Result) []string {
		var k []string
		for _, s := range r.Samples {
			k = append(k, fmt.Sprintf("%d@%d", s.Pair, s.ScheduledNS))
		}
		slices.Sort(k)
		return k
	}
	a := schedule(d.Single)
	return len(a) > 0 && slices.Equal(a, schedule(d.Result)), nil
}

// StartLagSpan is "lo–hi" of the shards' start lags (ms behind the planned
// start) in the merged result.
func (d Data) StartLagSpan(digits int) (string, error) {
	if d.Result == nil || d.Result.Merge == nil {
		return "", errors.New("the row has no merged shards result")
	}
	var lags []float64
	for _, s := range d.Result.Merge.Shards {
		lags = append(lags, s.StartLagMS)
	}
	if len(lags) == 0 {
		return "", errors.New("the merged result lists no shards")
	}
	return Data{Bench: BenchSet{"lag": {"ms": lags}}}.Span("lag", "ms", digits)
}

// SingleSummary is the single-process run's summary of one path at the
// first stage.
func (d Data) SingleSummary(path string) (bench.Summary, error) {
	if d.Single == nil {
		return bench.Summary{}, errors.New("the row has no shards run")
	}
	return Data{Result: d.Single}.Summary(path)
}
