package store_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// Environment of the re-executed test binary acting as a writer process.
const (
	helperDirEnv    = "CAPBENCH_STORE_HELPER_DIR"
	helperPrefixEnv = "CAPBENCH_STORE_HELPER_PREFIX"
	helperCountEnv  = "CAPBENCH_STORE_HELPER_COUNT"
	// helperAheadEnv, when set, makes the writer register each intent with
	// WriteIntent (not synced) and print "intent <call id>" once it returned.
	helperAheadEnv = "CAPBENCH_STORE_HELPER_AHEAD"
	helperRollout  = "durable"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDirEnv); dir != "" {
		os.Exit(runWriterProcess(dir, os.Getenv(helperPrefixEnv), os.Getenv(helperCountEnv), os.Getenv(helperAheadEnv) != ""))
	}
	os.Exit(m.Run())
}

// runWriterProcess puts records to one rollout and prints each call id once
// its put has returned, i.e. once the store acknowledged it. Records named
// "shared-<i>" are written by every writer with identical bytes. With ahead,
// intents are written with WriteIntent, and each is printed as "intent <call
// id>" once written.
func runWriterProcess(dir, prefix, count string, ahead bool) int {
	n, err := strconv.Atoi(count)
	if err != nil || n <= 0 {
		n = 1 << 30 // until killed
	}
	s, err := store.NewFileStore(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	out := bufio.NewWriter(os.Stdout)
	ctx := context.Background()
	for i := range n {
		for _, call := range []string{fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("shared-%d", i%7)} {
			if err := beginCall(ctx, s, call, ahead, out); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 3
			}
			if err := s.Put(ctx, helperEntry(call)); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 4
			}
			fmt.Fprintln(out, call)
			_ = out.Flush()
		}
	}
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 5
	}
	return 0
}

// beginCall registers call's intent as the writer process was told to.
func beginCall(ctx context.Context, s *store.FileStore, call string, ahead bool, out *bufio.Writer) error {
	if !ahead {
		return s.BeginCall(ctx, helperRollout, call)
	}
	if err := s.WriteIntent(ctx, helperRollout, call); err != nil {
		return err
	}
	fmt.Fprintln(out, "intent", call)
	return out.Flush()
}

// helperEntry is the record a writer process puts for call: a pure function
// of the call id, so a re-put from any process is byte-identical.
func helperEntry(call string) *record.Entry {
	return newEntry(helperRollout, call, len(call), 3, 151645)
}
