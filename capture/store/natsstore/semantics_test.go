package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/capture/store/natsstore"
)

// both is the subset of operations the differential spec replays.
type both interface {
	store.Sink
	store.Source
	store.Reader
	State(ctx context.Context, rolloutID string) (store.State, error)
	Delete(ctx context.Context, rolloutID string) error
}

type op struct {
	name string
	do   func(ctx context.Context, s both, id string, snap **store.Snapshot) error
}

func put(call string, variant int) op {
	return op{fmt.Sprintf("put %s/%d", call, variant), func(ctx context.Context, s both, id string, _ **store.Snapshot) error {
		e := entry(id, call, 0, 0)
		e.GenerationTokenIDs[0] += variant
		return s.Put(ctx, e)
	}}
}

func begin(call string) op {
	return op{"begin " + call, func(ctx context.Context, s both, id string, _ **store.Snapshot) error {
		return s.BeginCall(ctx, id, call)
	}}
}

func lose(call string) op {
	return op{"lose " + call, func(ctx context.Context, s both, id string, _ **store.Snapshot) error {
		return s.MarkIncomplete(ctx, id, call)
	}}
}

var freeze = op{"freeze", func(ctx context.Context, s both, id string, snap **store.Snapshot) error {
	var err error
	*snap, err = s.Freeze(ctx, id)
	return err
}}

func drop(versionDelta int) op {
	return op{fmt.Sprintf("drop %+d", versionDelta), func(ctx context.Context, s both, id string, snap **store.Snapshot) error {
		if *snap == nil {
			return errors.New("no snapshot")
		}
		ok, err := s.Drop(ctx, id, (*snap).SnapshotID, (*snap).Version+versionDelta)
		if err == nil && !ok {
			return errors.New("refused")
		}
		return err
	}}
}

// outcome is what the differential spec compares after each step.
type outcome struct {
	Err                           string
	Frozen, Retired, Incomplete   bool
	Version, Entries, SnapEntries int
	SnapIncomplete                bool
}

func errClass(err error) string {
	for _, e := range []error{store.ErrFrozen, store.ErrRetired, store.ErrConflict} {
		if errors.Is(err, e) {
			return e.Error()
		}
	}
	if err != nil {
		return err.Error()
	}
	return ""
}

func replay(ctx context.Context, s both, id string, ops []op) []outcome {
	Expect(s.Delete(ctx, id)).To(Succeed())
	var snap *store.Snapshot
	var out []outcome
	for _, o := range ops {
		err := o.do(ctx, s, id, &snap)
		st, serr := s.State(ctx, id)
		Expect(serr).NotTo(HaveOccurred())
		entries, rerr := s.ReadEntries(ctx, id)
		Expect(rerr).NotTo(HaveOccurred())
		oc := outcome{Err: errClass(err), Frozen: st.Frozen, Retired: st.Retired, Incomplete: st.Incomplete,
			Version: st.Version, Entries: len(entries)}
		if snap != nil {
			oc.SnapEntries, oc.SnapIncomplete = len(snap.Entries), snap.Incomplete
		}
		out = append(out, oc)
	}
	return out
}

var _ = Describe("the NATS store", func() {
	var s *natsstore.Store
	BeforeEach(func(ctx SpecContext) { s = open(ctx, embedded.URL()) })

	DescribeTable("gives the memory store's versions, flags and errors for the same operations",
		func(ctx SpecContext, ops ...op) {
			id := rolloutName("differential")
			want := replay(ctx, store.NewMemoryStore(), id, ops)
			got := replay(ctx, s, id, ops)
			for i := range ops {
				Expect(got[i]).To(Equal(want[i]), "after step %d (%s)", i+1, ops[i].name)
			}
		},
		Entry("puts, re-put, freeze, drop", put("a", 0), put("b", 0), put("a", 0), freeze, drop(0)),
		Entry("a conflicting re-put", put("a", 0), put("a", 1), freeze),
		Entry("a put after the freeze", put("a", 0), freeze, put("b", 0), drop(0)),
		Entry("a loss after the freeze invalidates the snapshot", put("a", 0), freeze, lose("c"), drop(0), freeze, drop(0)),
		Entry("a dangling intent", begin("a"), put("a", 0), begin("b"), freeze),
		Entry("a stale drop", put("a", 0), freeze, drop(1), drop(0), put("b", 0), freeze, lose("x")),
		Entry("freeze of an unknown rollout", freeze, freeze, begin("a"), drop(0)),
	)

	It("stores the record of a 32k-token call in one message", func(ctx SpecContext) {
		id := rolloutName("long-call")
		Expect(s.Delete(ctx, id)).To(Succeed())
		e := entry(id, "call-32k", 32768, 32768)
		line, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("32k+32k-token record bytes", len(line))
		Expect(int64(len(line))).To(BeNumerically(">", 1<<20), "the record must exceed NATS's default 1 MiB max_payload to prove the setting")
		Expect(s.Put(ctx, e)).To(Succeed())
		snap, err := s.Freeze(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(1))
		Expect(snap.Entries[0].PromptTokenIDs).To(Equal(e.PromptTokenIDs))
		Expect(snap.Entries[0].GenerationLogProbs).To(Equal(e.GenerationLogProbs))
	})

	It("refuses a record over the server's max_payload with what to change, and writes nothing", func(ctx SpecContext) {
		id := rolloutName("too-large")
		Expect(s.Delete(ctx, id)).To(Succeed())
		err := s.Put(ctx, entry(id, "huge", 400000, 200000))
		Expect(err).To(MatchError(ContainSubstring("max_payload")))
		Expect(err).To(MatchError(ContainSubstring("huge")))
		st, err := s.State(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Version).To(BeZero())
		Expect(s.Messages(ctx, id)).To(BeZero())
	})

	It("keeps one message when a publish is retried inside the duplicate window", func(ctx SpecContext) {
		id := rolloutName("retried-publish")
		Expect(s.Delete(ctx, id)).To(Succeed())
		e := entry(id, "call-1", 0, 0)
		line, err := e.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		By("a writer whose first publish landed but whose ack was lost")
		m, err := s.RawRecord(ctx, id, "call-1", line, record.EntryDigest(line))
		Expect(err).NotTo(HaveOccurred())
		_, err = s.JetStream().PublishMsg(ctx, m)
		Expect(err).NotTo(HaveOccurred())
		Expect(s.ReadEntries(ctx, id)).To(BeEmpty(), "a published but uncommitted record is not visible")
		By("retrying the whole put")
		Expect(s.Put(ctx, e)).To(Succeed())
		Expect(s.Messages(ctx, id)).To(Equal(1))
		snap, err := s.Freeze(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(1))
		Expect(snap.Incomplete).To(BeFalse())
	})

	It("detects another payload stored under the call id by a writer that died before committing", func(ctx SpecContext) {
		id := rolloutName("dead-writer")
		Expect(s.Delete(ctx, id)).To(Succeed())
		other := entry(id, "call-1", 0, 0)
		other.GenerationTokenIDs[0]++
		line, err := other.MarshalCanonical()
		Expect(err).NotTo(HaveOccurred())
		m, err := s.RawRecord(ctx, id, "call-1", line, record.EntryDigest(line))
		Expect(err).NotTo(HaveOccurred())
		_, err = s.JetStream().PublishMsg(ctx, m)
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Put(ctx, entry(id, "call-1", 0, 0))).To(MatchError(store.ErrConflict))
		snap, err := s.Freeze(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Incomplete).To(BeTrue())
		Expect(snap.Entries).To(BeEmpty())
	})

	It("starts a deleted rollout id over, even inside the duplicate window", func(ctx SpecContext) {
		id := rolloutName("reused")
		Expect(s.Delete(ctx, id)).To(Succeed())
		Expect(s.Put(ctx, entry(id, "call-1", 0, 0))).To(Succeed())
		Expect(s.Delete(ctx, id)).To(Succeed())
		Expect(s.ReadEntries(ctx, id)).To(BeEmpty())
		Expect(s.Put(ctx, entry(id, "call-1", 0, 0))).To(Succeed())
		snap, err := s.Freeze(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(1))
		Expect(snap.Version).To(Equal(2))
	})

	It("never answers from a state another client has changed since", func(ctx SpecContext) {
		id := rolloutName("stale-writer")
		Expect(s.Delete(ctx, id)).To(Succeed())
		other := open(ctx, embedded.URL())
		Expect(s.Put(ctx, entry(id, "call-1", 0, 0))).To(Succeed())
		snap, err := other.Freeze(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Put(ctx, entry(id, "call-2", 0, 0))).To(MatchError(store.ErrFrozen))
		ok, err := other.Drop(ctx, id, snap.SnapshotID, snap.Version)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue())
		Expect(s.Put(ctx, entry(id, "call-1", 0, 0))).To(MatchError(store.ErrRetired), "an identical re-put of a retired rollout")
		Expect(other.Delete(ctx, id)).To(Succeed())
		Expect(s.Put(ctx, entry(id, "call-1", 0, 0))).To(Succeed(), "the id starts over after a delete")
		got, err := other.Freeze(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Entries).To(HaveLen(1))
		Expect(got.Version).To(Equal(2))
	})

	It("commits every put of three clients writing one rollout at once", func(ctx SpecContext) {
		id := rolloutName("three-writers")
		Expect(s.Delete(ctx, id)).To(Succeed())
		const perClient = 20
		var wg sync.WaitGroup
		errs := make(chan error, 3*perClient)
		for c := range 3 {
			w := open(ctx, embedded.URL())
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for i := range perClient {
					call := fmt.Sprintf("c%d-%02d", c, i)
					if err := w.BeginCall(ctx, id, call); err != nil {
						errs <- err
						continue
					}
					errs <- w.Put(ctx, entry(id, call, 0, 0))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred())
		}
		snap, err := s.Freeze(ctx, id)
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(3 * perClient))
		Expect(snap.Incomplete).To(BeFalse())
		Expect(snap.Version).To(Equal(3*perClient + 1))
	})

	DescribeTable("keeps rollout ids that hold dots apart",
		func(ctx SpecContext, id string) {
			Expect(s.Delete(ctx, id)).To(Succeed())
			Expect(s.Put(ctx, entry(id, "call-1", 0, 0))).To(Succeed())
			ids, err := s.Rollouts(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(ids).To(ContainElement(id))
			got, err := s.ReadEntries(ctx, id)
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(HaveLen(1))
			Expect(got[0].RolloutID).To(Equal(id))
		},
		Entry("a dot inside", "run.7-0"),
		Entry("a leading dot", ".hidden"),
		Entry("a trailing dot", "trail."),
		Entry("two dots", "a..b"),
	)

	It("refuses ids the file store refuses", func(ctx SpecContext) {
		Expect(s.Put(ctx, entry("a/b", "c", 0, 0))).To(MatchError(store.ErrInvalidRolloutID))
		Expect(s.BeginCall(ctx, "ok", "bad\ncall")).To(MatchError(store.ErrInvalidCallID))
		Expect(s.MarkIncomplete(ctx, "a b", "c")).To(MatchError(store.ErrInvalidRolloutID))
		_, err := s.Freeze(ctx, "a*b")
		Expect(err).To(MatchError(store.ErrInvalidRolloutID))
	})
})

var _ = Describe("store URLs", func() {
	DescribeTable("are parsed into options",
		func(raw string, want natsstore.Options) {
			got, err := natsstore.ParseURL(raw)
			Expect(err).NotTo(HaveOccurred())
			Expect(got).To(Equal(want))
		},
		Entry("one server", "nats://127.0.0.1:4222", natsstore.Options{URL: "nats://127.0.0.1:4222"}),
		Entry("credentials", "nats://capture:s3cret@n1:4222,n2:4222", natsstore.Options{URL: "nats://capture:s3cret@n1:4222,nats://capture:s3cret@n2:4222"}),
		Entry("a cluster with names", "nats://n1:4222,n2:4222/?stream=S&bucket=b&prefix=x.y&replicas=3",
			natsstore.Options{URL: "nats://n1:4222,nats://n2:4222", Stream: "S", Bucket: "b", Prefix: "x.y", Replicas: 3}),
	)
	DescribeTable("are refused with what to write instead",
		func(raw, want string) {
			_, err := natsstore.ParseURL(raw)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("another scheme", "http://127.0.0.1:4222", "want nats://host:port"),
		Entry("no host", "nats:///", "no host"),
		Entry("a path", "nats://h:4222/capture", "options go in the query"),
		Entry("an unknown option", "nats://h:4222?strem=S", `unknown option "strem"`),
		Entry("bad replicas", "nats://h:4222?replicas=0", "positive integer"),
		Entry("bad timeout", "nats://h:4222?op_timeout=soon", "positive duration"),
	)
	It("never shows a password in its messages", func(ctx SpecContext) {
		_, err := natsstore.ParseURL("nats://capture:s3cret@h:4222?replicas=x")
		Expect(err).To(MatchError(ContainSubstring("replicas")))
		Expect(err.Error()).NotTo(ContainSubstring("s3cret"))
		_, err = natsstore.Open(ctx, natsstore.Options{URL: "nats://capture:s3cret@127.0.0.1:1"})
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).NotTo(ContainSubstring("s3cret"))
		Expect(err.Error()).To(ContainSubstring("127.0.0.1:1"))
	})

	It("fails to open against no server, naming the address", func(ctx SpecContext) {
		_, err := natsstore.Open(ctx, natsstore.Options{URL: "nats://127.0.0.1:1"})
		Expect(err).To(MatchError(ContainSubstring("127.0.0.1:1")))
	})
})

var _ = DescribeTable("which read errors are tried again",
	func(err error, retried bool) {
		Expect(natsstore.Retried(err)).To(Equal(retried))
	},
	Entry("a read behind the state (a lagging replica), though it names corruption",
		fmt.Errorf("%w: %w: r: the state indexes 1 records but the stream holds 0 of them", store.ErrCorrupt, natsstore.ErrLagging), true),
	Entry("corruption", fmt.Errorf("%w: state of r is not a capbench state", store.ErrCorrupt), false),
	Entry("a frozen rollout", store.ErrFrozen, false),
	Entry("a timeout", errors.New("nats: timeout"), true),
)
