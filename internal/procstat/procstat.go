// Package procstat reads what the benchmarks report of their own process:
// CPU time, which they give per operation beside their rates (on a shared
// machine CPU time per op moves far less than wall time), the live heap and
// the open descriptors, which show whether memory stays flat over a run.
package procstat

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
)

// CPU is this process's user + system time so far (0 where the kernel does
// not say).
func CPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// LiveHeap is the heap still reachable after two collections, in bytes:
// the second one frees what the first only found unreachable (objects with
// finalizers, the first sweep's leftovers).
func LiveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// OpenDescriptors counts this process's open file descriptors (Linux's
// /proc/self/fd).
func OpenDescriptors() (int, error) {
	names, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, fmt.Errorf("counting open descriptors: %w", err)
	}
	return len(names) - 1, nil // less the directory's own, open while it is read
}
