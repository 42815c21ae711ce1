package gpu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
)

// Formats of vLLM's KV-cache startup line, oldest first.
const (
	// LogFormatBlocks: "# GPU blocks: N, # CPU blocks: M" (or "# cuda
	// blocks: N") and "Maximum concurrency for 65536 tokens per request: Xx"
	// without thousands separators (V0 engine, early V1).
	LogFormatBlocks = "blocks"
	// LogFormatTwoLines: "GPU KV cache size: 249,856 tokens" and a separate
	// "Maximum concurrency for 65,536 tokens per request: Xx" (V1).
	LogFormatTwoLines = "two-lines"
	// LogFormatMerged: both in one line (V1, v0.10 onwards, incl. 0.29).
	LogFormatMerged = "merged"
)

// LogFacts is what a vLLM startup log says about its memory plan. Zero
// fields were not in the log.
type LogFacts struct {
	Format          string  `json:"format"`
	KVCacheTokens   int64   `json:"kv_cache_tokens"`
	NumBlocks       int64   `json:"num_gpu_blocks,omitempty"` // only in the blocks format
	MaxModelLen     int     `json:"max_model_len,omitempty"`
	MaxConcurrency  float64 `json:"max_concurrency,omitempty"`
	AvailableKVGiB  float64 `json:"available_kv_gib,omitempty"`
	ModelLoadingGiB float64 `json:"model_loading_gib,omitempty"`
	// Line is the 1-based line of the KV-cache figure.
	Line int `json:"line"`
}

var (
	reMerged      = regexp.MustCompile(`\b\w+ KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x`)
	reKVSize      = regexp.MustCompile(`\b\w+ KV cache size: ([\d,]+) tokens`)
	reConcurrency = regexp.MustCompile(`Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x`)
	reBlocks      = regexp.MustCompile(`# (?:GPU|gpu|cuda|CUDA|xpu|XPU|hpu|HPU|npu|NPU) blocks: (\d+)`)
	reAvailable   = regexp.MustCompile(`Available KV cache memory: ([\d.]+) GiB`)
	reLoading     = regexp.MustCompile(`(?:Model loading|Loading model weights) took ([\d.]+) (?:GiB|GB)`)
)

// ErrNoKVCacheLine means the log holds none of the three KV-cache formats.
var ErrNoKVCacheLine = errors.New("no KV-cache size line in the vLLM log")

func atoiCommas(s string) (int64, error) {
	return strconv.ParseInt(strings.ReplaceAll(s, ",", ""), 10, 64)
}

// ParseVLLMLog reads a vLLM startup log. blockSize converts the blocks
// format to tokens (0 means 16). The last occurrence of each figure wins, so
// a log of several restarts reports the latest one.
func ParseVLLMLog(r io.Reader, blockSize int) (*LogFacts, error) {
	if blockSize <= 0 {
		blockSize = DefaultBlockSize
	}
	f := &LogFacts{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	sawKVSize := false
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if err := f.scanLine(line, n, &sawKVSize, blockSize); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read vLLM log: %w", err)
	}
	if f.Format == "" {
		return nil, fmt.Errorf("%w (looked for %q, %q and %q)", ErrNoKVCacheLine,
			"GPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Xx",
			"GPU KV cache size: N tokens", "# GPU blocks: N")
	}
	return f, nil
}

func (f *LogFacts) scanLine(line string, n int, sawKVSize *bool, blockSize int) error {
	if m := reAvailable.FindStringSubmatch(line); m != nil {
		f.AvailableKVGiB, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reLoading.FindStringSubmatch(line); m != nil {
		f.ModelLoadingGiB, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reMerged.FindStringSubmatch(line); m != nil {
		return f.set(LogFormatMerged, n, m[1], m[2], m[3])
	}
	if m := reKVSize.FindStringSubmatch(line); m != nil {
		tokens, err := atoiCommas(m[1])
		if err != nil {
			return err
		}
		*sawKVSize = true
		f.Format, f.KVCacheTokens, f.NumBlocks, f.Line = LogFormatTwoLines, tokens, 0, n
		return nil
	}
	if m := reBlocks.FindStringSubmatch(line); m != nil {
		blocks, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return err
		}
		*sawKVSize = false
		f.Format, f.NumBlocks, f.KVCacheTokens, f.Line = LogFormatBlocks, blocks, blocks*int64(blockSize), n
		return nil
	}
	if m := reConcurrency.FindStringSubmatch(line); m != nil && f.Format != "" {
		l, err := atoiCommas(m[1])
		if err != nil {
			return err
		}
		f.MaxModelLen = int(l)
		f.MaxConcurrency, err = strconv.ParseFloat(m[2], 64)
		return err
	}
	return nil
}

func (f *LogFacts) set(format string, n int, tokens, maxLen, conc string) error {
	t, err := atoiCommas(tokens)
	if err != nil {
		return err
	}
	l, err := atoiCommas(maxLen)
	if err != nil {
		return err
	}
	c, err := strconv.ParseFloat(conc, 64)
	if err != nil {
		return err
	}
	f.Format, f.KVCacheTokens, f.MaxModelLen, f.MaxConcurrency, f.NumBlocks, f.Line = format, t, int(l), c, 0, n
	return nil
}

// LogDelta is one figure as the log and as the profile have it.
type LogDelta struct {
	Name    string  `json:"name"`
	Log     float64 `json:"log"`
	Profile float64 `json:"profile"`
	// ErrorPct is (profile − log) / log × 100.
	ErrorPct float64 `json:"error_pct"`
}

// CompareLog sets the profile's plan against a real log's figures. Figures
// the log lacks are left out.
func CompareLog(capa *Capacity, f *LogFacts) []LogDelta {
	var out []LogDelta
	add := func(name string, log, prof float64) {
		if log <= 0 {
			return
		}
		out = append(out, LogDelta{Name: name, Log: log, Profile: prof, ErrorPct: (prof - log) / log * 100})
	}
	add("kv_cache_tokens", float64(f.KVCacheTokens), float64(capa.KVCacheTokens))
	add("max_concurrency", f.MaxConcurrency, capa.MaxConcurrency)
	add("available_kv_gib", f.AvailableKVGiB, float64(capa.AvailableKVBytes)/float64(GiB))
	add("model_loading_gib", f.ModelLoadingGiB, float64(capa.WeightBytes)/float64(GiB))
	return out
}
