// Package cputime reads the process's CPU time, which the benchmarks report
// per operation beside their rates: on a shared machine CPU time per op moves
// far less than wall time.
package cputime

import (
	"syscall"
	"time"
)

// Process is this process's user + system time so far (0 where the kernel
// does not say).
func Process() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
