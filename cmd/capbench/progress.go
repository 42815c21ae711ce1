package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"

	"github.com/capbench/capbench/bench"
)

// benchProgress shows a load run: mpb bars on a terminal (requests, tokens,
// errors, ETA, current rate), periodic plain lines elsewhere (CI logs).
type benchProgress struct {
	out      io.Writer
	start    time.Time
	total    int64
	requests atomic.Int64
	tokens   atomic.Int64
	errs     atomic.Int64
	mu       sync.Mutex
	label    string
	// marks are (time, count) pairs of the last few seconds, for the
	// current rate.
	marks []rateMark
	p     *mpb.Progress
	bar   *mpb.Bar
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newBenchProgress(mode string, out io.Writer, total int, every time.Duration) (*benchProgress, error) {
	pr := &benchProgress{out: out, start: time.Now(), total: int64(total)}
	switch mode {
	case "auto":
		if isTerminal(out) {
			pr.bars()
		} else {
			pr.lines(every)
		}
	case "bars":
		pr.bars()
	case "lines":
		pr.lines(every)
	case "off":
	default:
		return nil, fmt.Errorf("--progress %q: want auto, bars, lines or off", mode)
	}
	return pr, nil
}

type rateMark struct {
	t time.Time
	n int64
}

// rateWindow is how far back the current rate looks.
const rateWindow = 5 * time.Second

// rate is the completion rate over the last rateWindow.
func (pr *benchProgress) rate() float64 {
	now, n := time.Now(), pr.requests.Load()
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.marks = append(pr.marks, rateMark{now, n})
	for len(pr.marks) > 2 && now.Sub(pr.marks[1].t) >= rateWindow {
		pr.marks = pr.marks[1:]
	}
	first := pr.marks[0]
	if first.t.Equal(now) {
		first = rateMark{pr.start, 0}
	}
	if s := now.Sub(first.t).Seconds(); s > 0 {
		return float64(n-first.n) / s
	}
	return 0
}

func (pr *benchProgress) bars() {
	pr.p = mpb.New(mpb.WithOutput(pr.out), mpb.WithWidth(40), mpb.WithAutoRefresh())
	total := pr.total
	if total <= 0 {
		total = 0 // unknown: the bar grows with the count
	}
	pr.bar = pr.p.AddBar(total,
		mpb.PrependDecorators(
			decor.Any(func(decor.Statistics) string { pr.mu.Lock(); defer pr.mu.Unlock(); return pr.label + " " }),
			decor.CountersNoUnit("%d/%d req", decor.WCSyncWidth),
		),
		mpb.AppendDecorators(
			decor.Any(func(decor.Statistics) string {
				return fmt.Sprintf(" %d tok, %d errors, %.1f req/s now ", pr.tokens.Load(), pr.errs.Load(), pr.rate())
			}),
			decor.OnComplete(decor.EwmaETA(decor.ET_STYLE_GO, 30), "done"),
		),
	)
}

func (pr *benchProgress) lines(every time.Duration) {
	if every <= 0 {
		every = 5 * time.Second
	}
	pr.stop, pr.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(pr.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				pr.line("")
			case <-pr.stop:
				return
			}
		}
	}()
}

func (pr *benchProgress) line(suffix string) {
	pr.mu.Lock()
	label := pr.label
	pr.mu.Unlock()
	of := ""
	if pr.total > 0 {
		of = fmt.Sprintf("/%d", pr.total)
	}
	fmt.Fprintf(pr.out, "bench %s: %d%s requests, %d tokens, %d errors, %.1f req/s now, %s elapsed%s\n",
		label, pr.requests.Load(), of, pr.tokens.Load(), pr.errs.Load(), pr.rate(), time.Since(pr.start).Round(time.Second), suffix)
}

func (pr *benchProgress) stage(i int, s bench.Shape) {
	pr.mu.Lock()
	pr.label = fmt.Sprintf("stage %d %s", i+1, s.Label())
	pr.mu.Unlock()
}

func (pr *benchProgress) observe(s *bench.Sample) {
	pr.requests.Add(1)
	pr.tokens.Add(int64(s.OutputTokens))
	if !s.OK() && s.ErrorKind != bench.ErrCanceled {
		pr.errs.Add(1)
	}
	if pr.bar != nil {
		if pr.total <= 0 {
			pr.bar.SetTotal(pr.requests.Load()+1, false)
		}
		pr.bar.EwmaIncrement(time.Duration(s.EndNS - s.StartNS))
	}
}

// finish ends the display whatever the run's end, so nothing hangs.
func (pr *benchProgress) finish() {
	pr.once.Do(func() {
		if pr.bar != nil {
			pr.bar.SetTotal(-1, true)
			pr.p.Wait()
		}
		if pr.stop != nil {
			close(pr.stop)
			<-pr.done
			pr.line(" (finished)")
		}
	})
}
