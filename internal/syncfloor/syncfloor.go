// Package syncfloor measures what the disk under a directory allows: how
// many operations of N appends, each made durable with fdatasync(2), a number
// of concurrent writers (one file each) complete per second, and how long one
// such operation takes with lines of given sizes. Benchmarks of
// the file store and the capture proxy run it side by side with themselves,
// so their figures come with the floor no store on that disk can beat.
package syncfloor

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// lineBytes is the size of each append: about a small record line.
const lineBytes = 2048

// Measure runs ops operations spread over writers goroutines, each
// appending to its own file in dir; one operation is syncsPerOp appends,
// each followed by fdatasync. It returns operations per second.
func Measure(dir string, writers, ops, syncsPerOp int) (float64, error) {
	if writers < 1 || ops < 1 || syncsPerOp < 1 {
		return 0, fmt.Errorf("syncfloor: writers, ops and syncs per op must be at least 1 (got %d, %d, %d)", writers, ops, syncsPerOp)
	}
	line := make([]byte, lineBytes)
	line[len(line)-1] = '\n'
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, writers)
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			errs[w] = appendLoop(filepath.Join(dir, "floor-"+strconv.Itoa(w)), line, syncsPerOp, func() bool { return next.Add(1) <= int64(ops) })
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return float64(ops) / elapsed.Seconds(), nil
}

// Latency is the median time, over rounds, of one operation that appends a
// line of each size in lineBytes to a file of its own and fdatasyncs it, in
// order: the floor for a call whose store makes those appends durable one
// after the other.
func Latency(dir string, lineBytes []int, rounds int) (time.Duration, error) {
	if len(lineBytes) == 0 || rounds < 1 {
		return 0, fmt.Errorf("syncfloor: need at least one line size and one round (got %d sizes, %d rounds)", len(lineBytes), rounds)
	}
	files := make([]*os.File, len(lineBytes))
	lines := make([][]byte, len(lineBytes))
	for i, n := range lineBytes {
		if n < 1 {
			return 0, fmt.Errorf("syncfloor: line size %d: must be at least 1 byte", n)
		}
		f, err := os.OpenFile(filepath.Join(dir, "latency-"+strconv.Itoa(i)), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return 0, fmt.Errorf("syncfloor: %w", err)
		}
		defer f.Close()
		files[i], lines[i] = f, make([]byte, n)
		lines[i][n-1] = '\n'
	}
	took := make([]time.Duration, rounds)
	for r := range took {
		start := time.Now()
		for i, f := range files {
			if _, err := f.Write(lines[i]); err != nil {
				return 0, fmt.Errorf("syncfloor: append to %s: %w", f.Name(), err)
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return 0, fmt.Errorf("syncfloor: fdatasync %s: %w", f.Name(), err)
			}
		}
		took[r] = time.Since(start)
	}
	slices.Sort(took)
	return took[rounds/2], nil
}

// appendLoop appends line to path and fdatasyncs it, syncsPerOp times for
// each operation more() grants.
func appendLoop(path string, line []byte, syncsPerOp int, more func() bool) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("syncfloor: %w", err)
	}
	defer f.Close()
	for more() {
		for range syncsPerOp {
			if _, err := f.Write(line); err != nil {
				return fmt.Errorf("syncfloor: append to %s: %w", path, err)
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return fmt.Errorf("syncfloor: fdatasync %s: %w", path, err)
			}
		}
	}
	return nil
}
