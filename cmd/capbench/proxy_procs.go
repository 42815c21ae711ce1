package main

import (
	"fmt"
	"os"
)

// gomaxprocsEnv is the variable the Go runtime reads GOMAXPROCS from; when
// it is set the runtime has already applied it and the proxy keeps it.
const gomaxprocsEnv = "GOMAXPROCS"

// proxyProcs is the GOMAXPROCS the proxy runs with: --gomaxprocs when
// given, else the environment's GOMAXPROCS when set, else twice the
// runtime's default (current) when the file store makes appends durable by
// group sync, else current. A writer whose group sync has finished waits
// for a P behind every other call's HTTP work; with more Ps than CPUs the
// kernel runs it as soon as it wakes (docs/store.md#group-commit).
func proxyProcs(flag int, envSet, groupSync bool, current int) int {
	switch {
	case flag > 0:
		return flag
	case envSet || !groupSync:
		return current
	}
	return 2 * current
}

// maxProcs bounds --gomaxprocs: every P has caches of its own, so a typo
// such as 100000 would cost the process memory and every stop of the world.
const maxProcs = 1024

// checkProcs refuses a --gomaxprocs out of range before anything is opened.
func checkProcs(flag int) error {
	if flag < 0 || flag > maxProcs {
		return fmt.Errorf("--gomaxprocs %d: must be 0 to %d (0: twice the CPUs with the file store's group sync, else Go's default)", flag, maxProcs)
	}
	return nil
}

// gomaxprocsFromEnv reports whether GOMAXPROCS is set in the environment.
func gomaxprocsFromEnv() bool {
	v, ok := os.LookupEnv(gomaxprocsEnv)
	return ok && v != ""
}
