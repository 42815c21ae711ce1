package store_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
	"github.com/capbench/capbench/internal/procstat"
)

func openDescriptors() int {
	n, err := procstat.OpenDescriptors()
	Expect(err).NotTo(HaveOccurred())
	return n
}

func stateFiles(dir string) int {
	names, err := filepath.Glob(filepath.Join(dir, "*.tokens.state.json"))
	Expect(err).NotTo(HaveOccurred())
	return len(names)
}

var _ = Describe("file store over a long uptime", func() {
	It("keeps memory and descriptors flat in the rollouts ever written, and Close has a bounded amount to write", func(ctx context.Context) {
		dir := GinkgoT().TempDir()
		fs, err := store.NewFileStore(dir, store.WithMaxIdleRollouts(20), store.WithIdleFlush(time.Hour))
		Expect(err).NotTo(HaveOccurred())
		fds := openDescriptors()
		for i := range 300 {
			id := fmt.Sprintf("long-%04d", i)
			Expect(fs.BeginCall(ctx, id, "c1")).To(Succeed())
			Expect(fs.Put(ctx, newEntry(id, "c1"))).To(Succeed())
			Expect(fs.Slots()).To(BeNumerically("<=", 20))
		}
		Expect(openDescriptors()).To(BeNumerically("<=", fds+3*20+2))
		Expect(stateFiles(dir)).To(BeZero()) // puts leave the state pending
		Expect(fs.Close()).To(Succeed())
		Expect(stateFiles(dir)).To(Equal(20))
		Expect(fs.Slots()).To(BeZero())
		Expect(openDescriptors()).To(BeNumerically("<=", fds+1))

		By("a forgotten rollout reading back exactly, its index rebuilt from the records")
		other, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		snap, err := other.Freeze(ctx, "long-0000")
		Expect(err).NotTo(HaveOccurred())
		Expect(snap.Entries).To(HaveLen(1))
		Expect(snap.Version).To(Equal(2))
		Expect(snap.Incomplete).To(BeFalse())
	})

	It("writes the state of a rollout that went idle and forgets it", func(ctx context.Context) {
		dir := GinkgoT().TempDir()
		fs, err := store.NewFileStore(dir, store.WithIdleFlush(20*time.Millisecond))
		Expect(err).NotTo(HaveOccurred())
		Expect(fs.Put(ctx, newEntry("quiet", "c1"))).To(Succeed())
		Expect(stateFiles(dir)).To(BeZero())
		time.Sleep(50 * time.Millisecond)
		Expect(fs.Put(ctx, newEntry("busy", "c1"))).To(Succeed())
		Expect(stateFiles(dir)).To(Equal(1))
		st, err := store.ParseState(mustRead(filepath.Join(dir, "quiet.tokens.state.json")))
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Version).To(Equal(1))
		Expect(st.EntryDigests).To(HaveKey("c1"))
		Expect(fs.Slots()).To(Equal(1))
	})
})

func mustRead(path string) []byte {
	b, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	return b
}

var _ = Describe("file store forgetting idle rollouts while others use them", func() {
	It("loses no acknowledged record and keeps every rollout's versions", func(ctx context.Context) {
		dir := GinkgoT().TempDir()
		fs, err := store.NewFileStore(dir, store.WithMaxIdleRollouts(2), store.WithIdleFlush(time.Millisecond))
		Expect(err).NotTo(HaveOccurred())
		const workers, rollouts, calls = 8, 12, 30
		type ack struct{ rollout, call string }
		acks := make(chan ack, workers*calls)
		done := make(chan struct{})
		for w := range workers {
			go func() {
				defer GinkgoRecover()
				defer func() { done <- struct{}{} }()
				for i := range calls {
					id := fmt.Sprintf("busy-%02d", (w*7+i)%rollouts)
					call := fmt.Sprintf("w%d-c%03d", w, i)
					Expect(fs.BeginCall(ctx, id, call)).To(Succeed())
					Expect(fs.Put(ctx, newEntry(id, call))).To(Succeed())
					if i%5 == 0 {
						_, err := fs.ReadEntries(ctx, id)
						Expect(err).NotTo(HaveOccurred())
						_, _, err = store.NewFollower(fs, id).Refresh(ctx)
						Expect(err).NotTo(HaveOccurred())
					}
					acks <- ack{id, call}
				}
			}()
		}
		for range workers {
			<-done
		}
		close(acks)
		Expect(fs.Close()).To(Succeed())
		want := map[string]map[string]bool{}
		for a := range acks {
			if want[a.rollout] == nil {
				want[a.rollout] = map[string]bool{}
			}
			want[a.rollout][a.call] = true
		}
		fresh, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		for id, calls := range want {
			snap, err := fresh.Freeze(ctx, id)
			Expect(err).NotTo(HaveOccurred())
			Expect(snap.Incomplete).To(BeFalse(), id)
			got := map[string]bool{}
			for _, e := range snap.Entries {
				Expect(got).NotTo(HaveKey(e.ModelCallID))
				got[e.ModelCallID] = true
			}
			Expect(got).To(Equal(calls), id)
			Expect(snap.Version).To(Equal(len(calls)+1), id)
		}
	})
})
