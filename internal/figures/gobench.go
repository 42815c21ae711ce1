package figures

import (
	"bufio"
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/capbench/capbench/internal/stats"
)

// BenchSet holds the metrics of `go test -bench` output: for each benchmark
// (its name without "Benchmark" and without the -GOMAXPROCS suffix, e.g.
// "StreamTTFT" or "Put/lazy-state/rollouts=64") and each unit ("ns/op",
// "puts/s"), one value per run (-count N gives N).
type BenchSet map[string]map[string][]float64

// procsSuffix is the -N go test appends to every name when GOMAXPROCS > 1.
var procsSuffix = regexp.MustCompile(`-\d+$`)

// ParseGoBench reads the benchmark lines of go test output
// ("BenchmarkName-2  10  123 ns/op  4.5 unit ..."); other lines are skipped.
func ParseGoBench(out []byte) (BenchSet, error) {
	type line struct {
		name   string
		fields []string
		no     int
	}
	var lines []line
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for no := 1; sc.Scan(); no++ {
		f := strings.Fields(sc.Text())
		// A result line is the name, the iteration count, then value/unit pairs.
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		lines = append(lines, line{name: f[0], fields: f[2:], no: no})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	// Strip -N only when every line carries the same one: with GOMAXPROCS=1
	// there is none, and a sub-benchmark may itself end in -digits.
	suffix := ""
	for i, l := range lines {
		s := procsSuffix.FindString(l.name)
		if i == 0 {
			suffix = s
		} else if s != suffix {
			suffix = ""
			break
		}
	}
	set := BenchSet{}
	for _, l := range lines {
		name := strings.TrimPrefix(strings.TrimSuffix(l.name, suffix), "Benchmark")
		units := set[name]
		if units == nil {
			units = map[string][]float64{}
			set[name] = units
		}
		for i := 0; i+1 < len(l.fields); i += 2 {
			v, err := strconv.ParseFloat(l.fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: value %q of %s: %w", l.no, l.fields[i], l.fields[i+1], err)
			}
			units[l.fields[i+1]] = append(units[l.fields[i+1]], v)
		}
	}
	return set, nil
}

// merge adds o's benchmarks; a name in both is an error (two runs of one
// row would otherwise mix).
func (s BenchSet) merge(o BenchSet) error {
	for name, units := range o {
		if _, dup := s[name]; dup {
			return fmt.Errorf("benchmark %s is in the output of two runs", name)
		}
		s[name] = units
	}
	return nil
}

// values returns the values of one metric, or an error naming what the
// output holds instead.
func (s BenchSet) values(name, unit string) ([]float64, error) {
	units, ok := s[name]
	if !ok {
		return nil, fmt.Errorf("no benchmark %q in the output (it has: %s)", name, strings.Join(s.names(), ", "))
	}
	vs, ok := units[unit]
	if !ok {
		var have []string
		for u := range units {
			have = append(have, u)
		}
		sort.Strings(have)
		return nil, fmt.Errorf("benchmark %q reports no %q (it has: %s)", name, unit, strings.Join(have, ", "))
	}
	return vs, nil
}

func (s BenchSet) names() []string {
	var ns []string
	for n := range s {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	if len(ns) == 0 {
		return []string{"no benchmark lines"}
	}
	return ns
}

// Med is the median of one metric over the runs (-count); with an even
// count, the mean of the middle two.
func (s BenchSet) Med(name, unit string) (float64, error) {
	vs, err := s.values(name, unit)
	if err != nil {
		return 0, err
	}
	return stats.Median(vs), nil
}

// Min is the smallest value of one metric over the runs.
func (s BenchSet) Min(name, unit string) (float64, error) {
	vs, err := s.values(name, unit)
	if err != nil {
		return 0, err
	}
	return slices.Min(vs), nil
}

// Max is the largest value of one metric over the runs.
func (s BenchSet) Max(name, unit string) (float64, error) {
	vs, err := s.values(name, unit)
	if err != nil {
		return 0, err
	}
	return slices.Max(vs), nil
}

// Count is how many runs reported the metric.
func (s BenchSet) Count(name, unit string) (int, error) {
	vs, err := s.values(name, unit)
	return len(vs), err
}
