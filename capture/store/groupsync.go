package store

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// groupSync makes appends durable in groups (docs/store.md#group-commit).
// Every rollout has files of its own, so concurrent calls append to
// different files and per-file fdatasync(2) cannot be shared: each call
// pays a sync of its own, and its kernel time, on a CPU the proxy needs.
// syncfs(2) writes back every dirty page and inode of the file system in one
// call, so one sync covers every append made before it started: a writer
// whose line is in the page cache joins the next sync and returns when that
// sync has finished.
//
// One sync runs at a time. Its writer (the leader) syncs, then hands the
// next group, if anyone joined it meanwhile, to one of that group's writers,
// so no writer waits for more than the sync it joined plus the one running
// when it joined. A group of one writer syncs only its own file.
//
// A whole-file-system sync only pays when enough writers share it. So while
// fewer than groupFrom writers are syncing, a writer syncs its own file at
// once. On a disk whose syncs overlap, two writers did better with a sync
// each and four broke even (BenchmarkGroupSync, an earlier machine). On a
// virtual disk whose fdatasync costs kernel CPU (about 400 µs each), few
// writers are ever inside a sync at once on two cores while the proxy's
// HTTP work takes the rest, and a threshold of four left 64 rollouts on a
// sync each: with two, BenchmarkProxyFileStore at 64 rollouts made 1.6–2.5×
// the captured calls a second and spent 20–30% less CPU per call, in
// alternating runs (16 rollouts: 0.9–1.7×). The store-only benchmark, with
// no HTTP work beside it, moved within its noise.
type groupSync struct {
	syncAll   func(*os.File) error // a sync of the whole file system f is on
	syncOne   func(*os.File) error // a sync of f alone
	groupFrom int                  // writers syncing at once from which they group
	counts    *syncCounters        // where the syncs run are counted; nil counts nothing

	mu       sync.Mutex
	inflight int        // writers in wait now
	running  bool       // a sync is running or handed to a writer to run
	next     *syncGroup // the writers the next sync to start covers
}

// defaultGroupFrom is where grouping starts (see groupSync).
const defaultGroupFrom = 2

type syncGroup struct {
	writers int
	done    chan struct{}
	lead    chan struct{} // holds one token when a writer of this group is to run its sync
	err     error
	whole   bool // the sync was of the whole file system (set before done closes)
}

func newSyncGroup() *syncGroup {
	return &syncGroup{done: make(chan struct{}), lead: make(chan struct{}, 1)}
}

func newGroupSync(counts *syncCounters) *groupSync {
	return &groupSync{syncAll: syncfs, syncOne: datasync, groupFrom: defaultGroupFrom, counts: counts, next: newSyncGroup()}
}

// syncfsReportsErrors is whether this kernel's syncfs(2) returns write-back
// errors: before Linux 5.8 it returned 0 even when writing back failed, so
// a group sync there could acknowledge a record that never reached the disk.
func syncfsReportsErrors() bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return kernelAtLeast(unix.ByteSliceToString(u.Release[:]), 5, 8)
}

// kernelAtLeast reports whether a release string such as "6.18.44-fc"
// names version major.minor or later.
func kernelAtLeast(release string, major, minor int) bool {
	var maj, min int
	if n, _ := fmt.Sscanf(release, "%d.%d", &maj, &min); n != 2 {
		return false
	}
	return maj > major || (maj == major && min >= minor)
}

// wait returns once a sync covering what was appended to f before the call
// has finished, with that sync's error: f's own sync while few writers are
// syncing, else the next sync of f's file system, started after the call.
// whole says it was a sync of the whole file system.
func (g *groupSync) wait(f *os.File) (whole bool, err error) {
	g.mu.Lock()
	g.inflight++
	defer func() {
		g.mu.Lock()
		g.inflight--
		g.mu.Unlock()
	}()
	if g.inflight < g.groupFrom {
		g.mu.Unlock()
		return false, g.counts.run(false, g.syncOne, f)
	}
	grp := g.next
	grp.writers++
	if !g.running {
		g.running = true
		g.mu.Unlock()
		return g.run(grp, f)
	}
	g.mu.Unlock()
	select {
	case <-grp.done:
		return grp.whole, grp.err
	case <-grp.lead:
		return g.run(grp, f)
	}
}

// run syncs for grp through f, whose file system every writer of grp
// appended to, then hands on the group that gathered meanwhile.
func (g *groupSync) run(grp *syncGroup, f *os.File) (whole bool, err error) {
	g.mu.Lock()
	alone := grp.writers == 1
	g.next = newSyncGroup()
	g.mu.Unlock()
	if alone {
		// A group of one needs only its own file: fdatasync writes less
		// than a sync of the whole file system.
		grp.err = g.counts.run(false, g.syncOne, f)
	} else {
		grp.whole = true
		grp.err = g.counts.run(true, g.syncAll, f)
	}
	close(grp.done)
	g.mu.Lock()
	if g.next.writers > 0 {
		g.next.lead <- struct{}{}
	} else {
		g.running = false
	}
	g.mu.Unlock()
	return grp.whole, grp.err
}

func syncfs(f *os.File) error {
	for {
		err := unix.Syncfs(int(f.Fd()))
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}
