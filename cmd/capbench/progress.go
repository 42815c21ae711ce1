package main

import (
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// progressBar shows a load run's requests as an mpb bar. mpb renders only on
// a terminal by default, so "auto" keeps CI logs free of escape codes.
type progressBar struct {
	p      *mpb.Progress
	bar    *mpb.Bar
	failed atomic.Int64
}

func newProgressBar(mode string, out io.Writer, total int) (*progressBar, error) {
	var opts []mpb.ContainerOption
	switch mode {
	case "auto":
		if f, ok := out.(*os.File); ok {
			opts = append(opts, mpb.WithOutput(f))
		} else {
			opts = append(opts, mpb.WithOutput(io.Discard))
		}
	case "on":
		opts = append(opts, mpb.WithOutput(out), mpb.ForceTTY(), mpb.WithAutoRefresh())
	case "off":
		opts = append(opts, mpb.WithOutput(io.Discard))
	default:
		return nil, fmt.Errorf("--progress %q: want auto, on or off", mode)
	}
	pb := &progressBar{p: mpb.New(append(opts, mpb.WithWidth(48))...)}
	pb.bar = pb.p.AddBar(int64(total),
		mpb.PrependDecorators(
			decor.Name("requests ", decor.WCSyncSpaceR),
			decor.CountersNoUnit("%d/%d", decor.WCSyncWidth),
		),
		mpb.AppendDecorators(
			decor.Any(func(decor.Statistics) string { return fmt.Sprintf(" failed %d ", pb.failed.Load()) }),
			decor.OnComplete(decor.EwmaETA(decor.ET_STYLE_GO, 30), "done"),
		),
	)
	return pb, nil
}

func (pb *progressBar) observe(ok bool, latency time.Duration) {
	if !ok {
		pb.failed.Add(1)
	}
	pb.bar.EwmaIncrement(latency)
}

// finish completes the bar whatever the run's end (budget, duration, error),
// so Wait cannot hang.
func (pb *progressBar) finish() {
	pb.bar.SetTotal(-1, true)
	pb.p.Wait()
}
