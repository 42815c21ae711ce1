package conformance_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/conformance"
	"github.com/capbench/capbench/capture/lineage"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/capture/store"
)

// fileFactories builds fresh FileStore clients over one directory, the way
// separate worker processes would open it.
func fileFactories(dir func() string) conformance.Factories {
	open := func() *store.FileStore {
		s, err := store.NewFileStore(dir())
		if err != nil {
			panic(err) // surfaces as the check's failure
		}
		return s
	}
	return conformance.Factories{
		NewSink:     func() store.Sink { return open() },
		NewSource:   func() store.Source { return open() },
		NewResolver: func() conformance.Resolver { return conformance.NewReaderResolver(open()) },
	}
}

// memoryFactories hands out the one shared MemoryStore; its Close is a no-op,
// so closing a "client" leaves the backend intact.
func memoryFactories(s func() *store.MemoryStore) conformance.Factories {
	return conformance.Factories{
		NewSink:     func() store.Sink { return s() },
		NewSource:   func() store.Source { return s() },
		NewResolver: func() conformance.Resolver { return conformance.NewReaderResolver(s()) },
	}
}

var sharedDir string

var _ = BeforeSuite(func() {
	var err error
	sharedDir, err = os.MkdirTemp("", "conformance-file-store-")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, sharedDir)
})

var sharedMemory = store.NewMemoryStore()

var _ = conformance.DescribeConformance("file store", fileFactories(func() string { return sharedDir }))

var _ = conformance.DescribeConformance("memory store", memoryFactories(func() *store.MemoryStore { return sharedMemory }))

var _ = conformance.DescribeConformance("memory store without a resolver", conformance.Factories{
	NewSink:   func() store.Sink { return sharedMemory2 },
	NewSource: func() store.Source { return sharedMemory2 },
})

var sharedMemory2 = store.NewMemoryStore()

// Deliberately broken transports: each must make its check fail.

// forgetfulBeginCall drops call intents on the floor.
type forgetfulBeginCall struct{ *store.MemoryStore }

func (forgetfulBeginCall) BeginCall(context.Context, string, string) error { return nil }

// versionBlindDrop retires whatever snapshot version it is handed.
type versionBlindDrop struct{ *store.MemoryStore }

func (v versionBlindDrop) Drop(ctx context.Context, rolloutID, snapshotID string, _ int) (bool, error) {
	st, err := v.State(ctx, rolloutID)
	if err != nil {
		return false, err
	}
	return v.MemoryStore.Drop(ctx, rolloutID, snapshotID, st.Version)
}

// amnesiacFreeze mints a new snapshot id on every freeze.
type amnesiacFreeze struct {
	*store.MemoryStore
	freezes *int
}

func (a amnesiacFreeze) Freeze(ctx context.Context, rolloutID string) (*store.Snapshot, error) {
	snap, err := a.MemoryStore.Freeze(ctx, rolloutID)
	if err == nil {
		*a.freezes++
		snap.SnapshotID = fmt.Sprintf("%s-%d", snap.SnapshotID, *a.freezes)
	}
	return snap, err
}

// unfrozenPut accepts late writes after a freeze by writing them elsewhere.
type unfrozenPut struct {
	*store.MemoryStore
	late *store.MemoryStore
}

func (u unfrozenPut) Put(ctx context.Context, e *record.Entry) error {
	err := u.MemoryStore.Put(ctx, e)
	if errors.Is(err, store.ErrFrozen) {
		return u.late.Put(ctx, e)
	}
	return err
}

// lossyPut keeps only the first payload of a call id and reports success
// for any other, without marking anything.
type lossyPut struct{ *store.MemoryStore }

func (l lossyPut) Put(ctx context.Context, e *record.Entry) error {
	st, err := l.State(ctx, e.RolloutID)
	if err != nil {
		return err
	}
	if _, seen := st.EntryDigests[e.ModelCallID]; seen {
		return nil
	}
	return l.MemoryStore.Put(ctx, e)
}

// blindResolver never finds a parent.
type blindResolver struct{}

func (blindResolver) Resolve(context.Context, string, []any) (lineage.Decision, error) {
	return lineage.Decision{Resolution: record.ResolutionUnresolved, Reason: "no_match"}, nil
}
func (blindResolver) Close() error { return nil }

func factoriesFor(sink store.Sink, source store.Source) conformance.Factories {
	return conformance.Factories{
		NewSink:   func() store.Sink { return sink },
		NewSource: func() store.Source { return source },
	}
}

var _ = Describe("the kit as a plain function", func() {
	It("passes every check on a correct store and names them in order", func() {
		m := store.NewMemoryStore()
		f := memoryFactories(func() *store.MemoryStore { return m })
		passed, err := conformance.Run(context.Background(), f, "")
		Expect(err).NotTo(HaveOccurred())
		Expect(passed).To(Equal(conformance.Checks(f)))
		Expect(passed).To(HaveLen(10))
		ids, err := m.Rollouts(context.Background())
		Expect(err).NotTo(HaveOccurred())
		Expect(ids).To(ContainElement("conformance-rollout-put-then-freeze-visibility"))
	})

	It("skips the lineage checks without a resolver", func() {
		m := store.NewMemoryStore()
		passed, err := conformance.Run(context.Background(), factoriesFor(m, m), "x")
		Expect(err).NotTo(HaveOccurred())
		Expect(passed).To(HaveLen(8))
		Expect(passed).NotTo(ContainElement(conformance.CheckLineageVisibility))
	})

	DescribeTable("detects a broken transport at the right check",
		func(build func() conformance.Factories, failing string) {
			passed, err := conformance.Run(context.Background(), build(), "broken")
			var ce *conformance.Error
			Expect(errors.As(err, &ce)).To(BeTrue(), "expected a conformance error, got %v", err)
			Expect(ce.Check).To(Equal(failing))
			Expect(ce.Detail).NotTo(BeEmpty())
			Expect(passed).NotTo(ContainElement(failing))
		},
		Entry("begin_call ignored", func() conformance.Factories {
			s := forgetfulBeginCall{store.NewMemoryStore()}
			return factoriesFor(s, s)
		}, conformance.CheckBeginCallCustody),
		Entry("drop ignores the version", func() conformance.Factories {
			s := versionBlindDrop{store.NewMemoryStore()}
			return factoriesFor(s, s)
		}, conformance.CheckMarkIncompleteDurability),
		Entry("freeze mints a new snapshot id each time", func() conformance.Factories {
			s := amnesiacFreeze{store.NewMemoryStore(), new(int)}
			return factoriesFor(s, s)
		}, conformance.CheckFreezeIdempotency),
		Entry("a late put lands somewhere and the drop still succeeds", func() conformance.Factories {
			s := unfrozenPut{store.NewMemoryStore(), store.NewMemoryStore()}
			return factoriesFor(s, s)
		}, conformance.CheckPostFreezeWriteSafety),
		Entry("a conflicting payload is swallowed silently", func() conformance.Factories {
			s := lossyPut{store.NewMemoryStore()}
			return factoriesFor(s, s)
		}, conformance.CheckConflictingReput),
		Entry("a resolver that cannot see committed records", func() conformance.Factories {
			m := store.NewMemoryStore()
			f := factoriesFor(m, m)
			f.NewResolver = func() conformance.Resolver { return blindResolver{} }
			return f
		}, conformance.CheckLineageVisibility),
	)

	It("reports the conditional-retirement failure of a version-blind drop on its own", func() {
		s := versionBlindDrop{store.NewMemoryStore()}
		err := conformance.RunCheck(context.Background(), factoriesFor(s, s),
			conformance.CheckConditionalRetirement, "solo")
		var ce *conformance.Error
		Expect(errors.As(err, &ce)).To(BeTrue())
		Expect(ce.Check).To(Equal(conformance.CheckConditionalRetirement))
	})

	It("turns a panicking factory into the check's failure", func() {
		f := conformance.Factories{
			NewSink:   func() store.Sink { panic("backend down") },
			NewSource: func() store.Source { return store.NewMemoryStore() },
		}
		_, err := conformance.Run(context.Background(), f, "")
		var ce *conformance.Error
		Expect(errors.As(err, &ce)).To(BeTrue())
		Expect(ce.Check).To(Equal(conformance.CheckPutThenFreezeVisibility))
		Expect(ce.Detail).To(ContainSubstring("backend down"))
	})

	It("requires sink and source factories", func() {
		_, err := conformance.Run(context.Background(), conformance.Factories{}, "")
		Expect(err).To(HaveOccurred())
	})
})

var _ = Describe("repeated runs", func() {
	It("can run twice against one backend because each check clears its rollout first", func() {
		dir := GinkgoT().TempDir()
		f := fileFactories(func() string { return dir })
		for range 2 {
			passed, err := conformance.Run(context.Background(), f, "again")
			Expect(err).NotTo(HaveOccurred())
			Expect(passed).To(HaveLen(10))
		}
	})
})
