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

// checkProcs refuses a negative --gomaxprocs before anything is opened.
func checkProcs(flag int) error {
	if flag < 0 {
		return fmt.Errorf("--gomaxprocs %d: must not be negative (0: twice the CPUs with the file store's group sync, else Go's default)", flag)
	}
	return nil
}

// gomaxprocsFromEnv reports whether GOMAXPROCS is set in the environment.
func gomaxprocsFromEnv() bool {
	v, ok := os.LookupEnv(gomaxprocsEnv)
	return ok && v != ""
}
