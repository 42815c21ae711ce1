package natsstore_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/conformance"
	"github.com/capbench/capbench/capture/store/natsstore"
	"github.com/capbench/capbench/internal/natstest"
)

// process is a nats-server OS process built from the module (started on
// first use, killed after the suite).
var (
	processOnce sync.Once
	process     *natstest.Process
	processErr  error
)

func serverProcess() *natstest.Process {
	if testing.Short() {
		Skip("-short: no nats-server process (it is built with go build first)")
	}
	processOnce.Do(func() {
		dir, err := os.MkdirTemp("", "natsstore-process-")
		if err != nil {
			processErr = err
			return
		}
		bin, err := natstest.BuildBinary(dir)
		if err != nil {
			processErr = err
			return
		}
		process, processErr = natstest.StartProcess(bin, dir)
	})
	Expect(processErr).NotTo(HaveOccurred())
	return process
}

func stopProcess() {
	if process != nil {
		process.Kill()
		_ = os.RemoveAll(process.Dir())
	}
}

var _ = Describe("against a separate nats-server process", Label("e2e"), func() {
	BeforeEach(func() { serverProcess() })

	// The kit, unchanged, through TCP to another process.
	conformance.DescribeConformance("NATS JetStream store (nats-server process)",
		factories(func() string { return serverProcess().URL() }))
})

// callOutcome is what one load call ended as.
type callOutcome struct {
	rollout, call string
	begun, acked  bool
}

// loadReport is the reliability numbers of one fault run.
type loadReport struct {
	Calls, Begun, BeginFailed, Acked, PutFailed int
	Rollouts, Incomplete                        int
	AckedLost, Duplicates, FailedButComplete    int
}

func (r loadReport) String() string {
	return fmt.Sprintf("calls %d: begun %d (begin failed %d), acknowledged %d, put failed %d; rollouts %d, incomplete %d; acknowledged but lost %d, duplicates %d, failed yet complete %d",
		r.Calls, r.Begun, r.BeginFailed, r.Acked, r.PutFailed, r.Rollouts, r.Incomplete, r.AckedLost, r.Duplicates, r.FailedButComplete)
}

// runLoad runs writers that each fill rollouts of calls per rollout, and per
// call begin it and put its record as the proxy does (a failed put is
// followed by a best-effort mark_incomplete). They run until fault has
// returned and the store has served a while after it.
func runLoad(ctx context.Context, url, base string, writers, calls int, fault func()) []callOutcome {
	var mu sync.Mutex
	var out []callOutcome
	var wg sync.WaitGroup
	stop := make(chan struct{})
	started := make(chan struct{}, writers)
	for w := range writers {
		s := open(ctx, url)
		wg.Add(1)
		go func() {
			defer GinkgoRecover()
			defer wg.Done()
			started <- struct{}{}
			for r := 0; ; r++ {
				id := fmt.Sprintf("%s-w%d-r%d", base, w, r)
				for c := range calls {
					select {
					case <-stop:
						return
					default:
					}
					oc := callOutcome{rollout: id, call: fmt.Sprintf("call-%03d", c)}
					if err := s.BeginCall(ctx, id, oc.call); err == nil {
						oc.begun = true
						if err := s.Put(ctx, entry(id, oc.call, 3000, 300)); err == nil {
							oc.acked = true
						} else {
							_ = s.MarkIncomplete(ctx, id, oc.call)
						}
					}
					mu.Lock()
					out = append(out, oc)
					mu.Unlock()
				}
			}
		}()
	}
	for range writers {
		<-started
	}
	fault()
	time.Sleep(time.Second)
	close(stop)
	wg.Wait()
	return out
}

// audit freezes every rollout with a fresh client and checks the contract:
// acknowledged records are there exactly once, and a rollout with a begun
// call that was not stored is incomplete.
func audit(ctx context.Context, url string, out []callOutcome) loadReport {
	s := open(ctx, url)
	byRollout := map[string][]callOutcome{}
	var rep loadReport
	for _, oc := range out {
		byRollout[oc.rollout] = append(byRollout[oc.rollout], oc)
		rep.Calls++
		switch {
		case oc.acked:
			rep.Begun++
			rep.Acked++
		case oc.begun:
			rep.Begun++
			rep.PutFailed++
		default:
			rep.BeginFailed++
		}
	}
	for id, calls := range byRollout {
		snap, err := s.Freeze(ctx, id)
		Expect(err).NotTo(HaveOccurred(), "freeze %s", id)
		rep.Rollouts++
		if snap.Incomplete {
			rep.Incomplete++
		}
		have := map[string]int{}
		for _, e := range snap.Entries {
			have[e.ModelCallID]++
		}
		failed := false
		for _, oc := range calls {
			if oc.acked && have[oc.call] == 0 {
				rep.AckedLost++
			}
			if have[oc.call] > 1 {
				rep.Duplicates++
			}
			// A put whose acknowledgement was lost in the fault may still
			// have been stored: that call is not lost, and its record
			// resolves its intent. Only a begun call with no record must
			// leave the rollout incomplete.
			if oc.begun && !oc.acked && have[oc.call] == 0 {
				failed = true
			}
		}
		if failed && !snap.Incomplete {
			rep.FailedButComplete++
		}
	}
	return rep
}

var _ = Describe("faults with a nats-server process", Label("e2e", "faults"), Serial, func() {
	DescribeTable("never lose an acknowledged record, and mark what could not be stored",
		func(ctx SpecContext, name, query string, fault func(p *natstest.Process), wantFailures bool) {
			p := serverProcess()
			url := p.URL() + query
			base := fmt.Sprintf("fault-%s-%d", name, time.Now().UnixNano())
			out := runLoad(ctx, url, base, 4, 25, func() { fault(p) })
			Expect(p.Running()).To(BeTrue(), "the fault must leave the server running")
			rep := audit(ctx, p.URL(), out)
			AddReportEntry("nats fault "+name, rep.String())
			fmt.Fprintf(GinkgoWriter, "%s: %s\n", name, rep)
			Expect(rep.AckedLost).To(BeZero(), rep.String())
			Expect(rep.Duplicates).To(BeZero(), rep.String())
			Expect(rep.FailedButComplete).To(BeZero(), rep.String())
			Expect(rep.Acked).To(BeNumerically(">", 0), rep.String())
			if wantFailures {
				Expect(rep.PutFailed+rep.BeginFailed).To(BeNumerically(">", 0), "the outage must outlast the operation budget: %s", rep)
			}
		},
		Entry("server killed and restarted mid-load", SpecTimeout(3*time.Minute), "restart", "",
			func(p *natstest.Process) {
				time.Sleep(300 * time.Millisecond)
				p.Kill()
				time.Sleep(700 * time.Millisecond)
				Expect(p.Restart()).To(Succeed())
			}, false),
		Entry("partition: server gone longer than the operation budget", SpecTimeout(3*time.Minute), "partition", "?op_timeout=1500ms",
			func(p *natstest.Process) {
				time.Sleep(300 * time.Millisecond)
				p.Kill()
				time.Sleep(4 * time.Second)
				Expect(p.Restart()).To(Succeed())
			}, true),
	)
})

var _ = natsstore.DefaultStream // the package under test
