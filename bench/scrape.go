package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ServerPoint is one scrape of vLLM's /metrics.
type ServerPoint struct {
	TNS         int64   `json:"t_ns"`
	Running     float64 `json:"running"`
	Waiting     float64 `json:"waiting"`
	KVUsage     float64 `json:"kv_cache_usage"`
	Preemptions float64 `json:"preemptions_total"`
}

// ServerSeries is the time series scraped during a run.
type ServerSeries struct {
	URL      string        `json:"url"`
	Interval time.Duration `json:"interval_ns"`
	Points   []ServerPoint `json:"points"`
	Errors   int           `json:"errors,omitempty"`
	// LastError is the most recent scrape failure.
	LastError string `json:"last_error,omitempty"`
}

// Scraper polls a /metrics URL until stopped.
type Scraper struct {
	mu     sync.Mutex
	series ServerSeries
	stop   chan struct{}
	done   chan struct{}
}

// StartScraper polls url every interval (relative times to base).
func StartScraper(ctx context.Context, client *http.Client, url string, interval time.Duration, base time.Time) *Scraper {
	sc := &Scraper{series: ServerSeries{URL: url, Interval: interval}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sc.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			sc.once(ctx, client, url, base)
			select {
			case <-t.C:
			case <-sc.stop:
				sc.once(ctx, client, url, base)
				return
			case <-ctx.Done():
				return
			}
		}
	}()
	return sc
}

// Stop ends polling and returns the series.
func (sc *Scraper) Stop() *ServerSeries {
	close(sc.stop)
	<-sc.done
	sc.mu.Lock()
	defer sc.mu.Unlock()
	s := sc.series
	return &s
}

func (sc *Scraper) once(ctx context.Context, client *http.Client, url string, base time.Time) {
	p, err := scrape(ctx, client, url)
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if err != nil {
		sc.series.Errors++
		sc.series.LastError = err.Error()
		return
	}
	p.TNS = time.Since(base).Nanoseconds()
	sc.series.Points = append(sc.series.Points, p)
}

func scrape(ctx context.Context, client *http.Client, url string) (ServerPoint, error) {
	var p ServerPoint
	err := ReadMetrics(ctx, client, url, func(r io.Reader) (err error) {
		p, err = ParseServerMetrics(r)
		return err
	})
	return p, err
}

// ReadMetrics GETs a /metrics page within two seconds and hands its body
// to read.
func ReadMetrics(ctx context.Context, client *http.Client, url string, read func(io.Reader) error) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer closeBody(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return read(resp.Body)
}

// ParseServerMetrics reads the gauges a load report plots from vLLM's text
// exposition (sums over engines; both vllm:gpu_cache_usage_perc and the
// newer vllm:kv_cache_usage_perc are accepted).
func ParseServerMetrics(r io.Reader) (ServerPoint, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return ServerPoint{}, fmt.Errorf("parse /metrics: %w", err)
	}
	var p ServerPoint
	found := false
	for name, f := range fams {
		v := sumFamily(f)
		switch strings.TrimPrefix(name, "vllm:") {
		case "num_requests_running":
			p.Running, found = v, true
		case "num_requests_waiting":
			p.Waiting = v
		case "kv_cache_usage_perc", "gpu_cache_usage_perc":
			p.KVUsage = v
		case "num_preemptions_total", "num_preemptions":
			p.Preemptions = v
		}
	}
	if !found {
		return p, fmt.Errorf("parse /metrics: no vllm:num_requests_running (not a vLLM metrics page?)")
	}
	return p, nil
}

func sumFamily(f *dto.MetricFamily) float64 {
	var v float64
	for _, m := range f.GetMetric() {
		switch {
		case m.Gauge != nil:
			v += m.GetGauge().GetValue()
		case m.Counter != nil:
			v += m.GetCounter().GetValue()
		case m.Untyped != nil:
			v += m.GetUntyped().GetValue()
		}
	}
	return v
}
