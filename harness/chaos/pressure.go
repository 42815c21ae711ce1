package chaos

// Scenarios that press on the proxy's limits rather than its durability.

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/harness/env"
)

// SlowClientFlood opens cfg.FloodConns idle connections (half send part of
// a request and stop, half go idle after one request) against a proxy with
// fewer descriptors than that (and the default connection cap, half of
// them), then measures whether real callers get in.
func SlowClientFlood(ctx context.Context, cfg Config) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	s, err := newStack(ctx, cfg, "flood", nil)
	if err != nil {
		return Row{}, err
	}
	defer s.close()
	// The default --max-connections (half the descriptors) is what is tested.
	nofile := uint64(max(256, cfg.FloodConns*3/4))
	p, err := s.addProxy(ctx, env.ProxySpec{MaxOpenFiles: nofile, Args: []string{"--read-header-timeout", "1s", "--idle-timeout", "30s"}})
	if err != nil {
		return Row{}, err
	}
	host := strings.TrimPrefix(p.URL(), "http://")
	conns := flood(ctx, host, cfg.FloodConns)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	l := newLoad("flood", cfg.Concurrency, p.URL())
	start := time.Now()
	runFor(ctx, l, cfg.Duration)
	row := Row{Scenario: "slow-client flood", Load: loadLabel(cfg.Concurrency, cfg.Duration),
		Faults: fmt.Sprintf("%d idle conns, proxy nofile %d", len(conns), nofile)}
	row.Notes = fmt.Sprintf("real calls %d in %s", l.acked.Load(), time.Since(start).Round(100*time.Millisecond))
	return s.finish(ctx, l, row, s.dir)
}

// flood opens n connections: even ones send half a request line and stop,
// odd ones make one keep-alive request and then sit idle.
func flood(ctx context.Context, host string, n int) []net.Conn {
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			d := net.Dialer{Timeout: 2 * time.Second}
			c, err := d.DialContext(ctx, "tcp", host)
			if err != nil {
				return
			}
			if i%2 == 0 {
				_, _ = c.Write([]byte("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"))
			} else {
				_, _ = c.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\n\r\n"))
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				buf := make([]byte, 512)
				_, _ = c.Read(buf)
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return conns
}

// WatchOpenRollouts is the watch's --max-open-rollouts: the file store may
// keep three descriptors for each of that many idle rollouts.
const WatchOpenRollouts = 4

// Watch sends cfg.WatchCalls calls and samples the proxy's memory and
// descriptors; the notes give the resident set and open files before, at
// the peak and after the callers have gone.
func Watch(ctx context.Context, cfg Config) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	s, err := newStack(ctx, cfg, "watch", nil)
	if err != nil {
		return Row{}, err
	}
	defer s.close()
	p, err := s.addProxy(ctx, env.ProxySpec{Args: []string{"--idle-timeout", "1s", "--max-open-rollouts", strconv.Itoa(WatchOpenRollouts)}})
	if err != nil {
		return Row{}, err
	}
	before, err := p.Usage()
	if err != nil {
		return Row{}, err
	}
	l := newLoad("watch", cfg.Concurrency, p.URL())
	l.maxCalls = int64(cfg.WatchCalls)
	done := make(chan struct{})
	peak := make(chan int, 1)
	go func() {
		fds := before.OpenFiles
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				peak <- fds
				return
			case <-t.C:
				if u, err := p.Usage(); err == nil {
					fds = max(fds, u.OpenFiles)
				}
			}
		}
	}()
	start := time.Now()
	l.run(ctx)
	took := time.Since(start)
	close(done)
	peakFDs := <-peak
	// The callers are gone; the proxy's idle timeout closes their sockets.
	var after env.Usage
	deadline := time.Now().Add(5 * time.Second)
	for {
		if after, err = p.Usage(); err != nil {
			return Row{}, err
		}
		if after.OpenFiles <= before.OpenFiles+2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	row := Row{Scenario: "memory and descriptor watch", Load: fmt.Sprintf("%d calls, %d callers, %s", cfg.WatchCalls, cfg.Concurrency, took.Round(100*time.Millisecond)),
		Faults: "none"}
	row.Usage = &Usage{RSSBefore: before.RSSBytes, RSSAfter: after.RSSBytes, FDsBefore: before.OpenFiles, FDsPeak: peakFDs, FDsAfter: after.OpenFiles}
	row.Notes = fmt.Sprintf("rss %s→%s, fds %d→%d→%d", mib(before.RSSBytes), mib(after.RSSBytes), before.OpenFiles, peakFDs, after.OpenFiles)
	return s.finish(ctx, l, row, s.dir)
}

func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

// BigBodies sends rounds of eight large bodies at once, first to a proxy
// whose in-flight budget admits all eight, then to one with the default
// budget (twice --max-body-bytes), and reports both peak resident sets: the
// budget is what keeps a burst of big requests from taking the proxy's
// memory with it.
func BigBodies(ctx context.Context, cfg Config) (Row, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Row{}, err
	}
	const parallel, rounds = 8, 3
	size := cfg.BodyBytes
	limit := fmt.Sprint(size + size/4)
	unbounded, err := bigBodyRun(ctx, cfg, "big-open", parallel, rounds, size,
		"--max-body-bytes", limit, "--max-inflight-body-bytes", fmt.Sprint(int64(parallel+1)*(size+size/4)))
	if err != nil {
		return Row{}, err
	}
	row, err := bigBodyRun(ctx, cfg, "big", parallel, rounds, size, "--max-body-bytes", limit)
	if err != nil {
		return Row{}, err
	}
	row.Scenario = "big bodies"
	row.Load = fmt.Sprintf("%d × %d MiB bodies at once, %d rounds", parallel, size>>20, rounds)
	row.Faults = fmt.Sprintf("--max-body-bytes %s, default budget", limit)
	row.Notes = strings.TrimSpace(fmt.Sprintf("budget for all %d: peak RSS %s %s", parallel, mib(unbounded.PeakRSSBytes), row.Notes))
	row.PeerPeakRSSBytes = unbounded.PeakRSSBytes
	return row, nil
}

// bigBodyTTFT is the big-bodies fake's delay before the first token.
const bigBodyTTFT = 300 * time.Millisecond

// bigBodyRun is one half of BigBodies: one proxy with args, rounds of
// parallel calls each padded to size bytes.
func bigBodyRun(ctx context.Context, cfg Config, name string, parallel, rounds int, size int64, args ...string) (Row, error) {
	// A first-token delay keeps every admitted call (and its parsed body)
	// in flight at once, however the machine schedules the proxy: without
	// it, on a busy machine the open run's bodies pass one after another
	// and its peak says little about what the budget bounds.
	s, err := newStack(ctx, cfg, name, func(o *vllm.Options) { o.Timing.TTFT = bigBodyTTFT })
	if err != nil {
		return Row{}, err
	}
	defer s.close()
	p, err := s.addProxy(ctx, env.ProxySpec{Args: args})
	if err != nil {
		return Row{}, err
	}
	l := newLoad(name, parallel, p.URL())
	l.padding = int(size)
	l.maxCalls = int64(parallel * rounds)
	l.run(ctx)
	return s.finish(ctx, l, Row{}, s.dir)
}
