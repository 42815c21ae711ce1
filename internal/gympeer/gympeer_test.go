package gympeer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/internal/gympeer"
)

var _ = Describe("ParseReply", func() {
	DescribeTable("refuses what the driver could not have meant, saying what was wrong",
		func(line, op, want string) {
			_, err := gympeer.ParseReply([]byte(line), op)
			Expect(err).To(MatchError(ContainSubstring(want)))
		},
		Entry("nothing", "", gympeer.OpConsume, "empty reply"),
		Entry("a traceback on stdout", "Traceback (most recent call last):", gympeer.OpConsume, "reply is not JSON"),
		Entry("two values", `{"ok":true,"op":"info","schema_version":5} {}`, gympeer.OpInfo, "more than one JSON value"),
		Entry("another op's reply", `{"ok":true,"op":"put","seconds":1}`, gympeer.OpConsume, `reply is for op "put", want "consume"`),
		Entry("a failure Gym raised", `{"ok":false,"op":"consume","error":"ValidationError: schema_version 5"}`, gympeer.OpConsume, "Gym raised ValidationError: schema_version 5"),
		Entry("a failure without a reason", `{"ok":false,"op":"consume"}`, gympeer.OpConsume, "failed without saying why"),
		Entry("a timed op without a time", `{"ok":true,"op":"consume","n_calls":3}`, gympeer.OpConsume, "reply has no seconds"),
		Entry("a negative time", `{"ok":true,"op":"put","seconds":-0.5,"puts":3}`, gympeer.OpPut, "is not a duration"),
		Entry("info without a schema", `{"ok":true,"op":"info"}`, gympeer.OpInfo, "no record schema version"),
	)

	It("reads a consume reply, keeping Gym's build error apart from a failed op", func() {
		rep, err := gympeer.ParseReply([]byte(`{"ok":true,"op":"consume","seconds":0.25,"cpu_seconds":0.2,"mask_sample":true,"error":"capture contains no token records","n_calls":0}`), gympeer.OpConsume)
		Expect(err).NotTo(HaveOccurred())
		Expect(rep.Secs()).To(Equal(0.25))
		Expect(rep.MaskSample).To(BeTrue())
		Expect(rep.BuildError).To(Equal("capture contains no token records"))
		Expect(rep.Error).To(BeEmpty())
	})
})

var _ = Describe("Paired", func() {
	It("is the median of per-round ratios, not the ratio of medians", func() {
		var p gympeer.Paired
		p.Add(10*time.Millisecond, 100*time.Millisecond)  // 10×
		p.Add(20*time.Millisecond, 100*time.Millisecond)  // 5×
		p.Add(100*time.Millisecond, 300*time.Millisecond) // 3×
		Expect(p.Ratio()).To(BeNumerically("~", 5, 1e-9))
		Expect(p.Rounds()).To(Equal(3))
		Expect(p.Ours()).To(BeNumerically("~", 20, 1e-9))
		Expect(p.Gym()).To(BeNumerically("~", 100, 1e-9))
		Expect(gympeer.OursFirst(0)).NotTo(Equal(gympeer.OursFirst(1)))
	})
})

var _ = Describe("Open", func() {
	It("names what it wants when the directory holds no Gym", func() {
		_, err := gympeer.Open(context.Background(), GinkgoT().TempDir(), "", GinkgoT().TempDir())
		Expect(err).To(MatchError(ContainSubstring("the directory that contains nemo_gym/")))
	})

	Context("against a stand-in Gym package", func() {
		var peer *gympeer.Peer
		BeforeEach(func() {
			if _, err := exec.LookPath("python3"); err != nil {
				Skip("python3 is not installed: the driver cannot run")
			}
			var err error
			peer, err = gympeer.Open(context.Background(), filepath.Join("testdata", "fakegym"), "", GinkgoT().TempDir())
			Expect(err).NotTo(HaveOccurred())
		})

		It("reads the schema Gym takes and refuses newer records by name", func() {
			Expect(peer.SchemaVersion).To(Equal(1))
			Expect(peer.Reads(1)).To(Succeed())
			Expect(peer.Reads(record.SchemaVersion)).To(MatchError(ContainSubstring("reads record schema up to 1, but capbench writes 5")))
		})

		It("carries an exception Gym raised back as an error, in a session and in one process", func() {
			s, err := peer.Start(context.Background())
			Expect(err).NotTo(HaveOccurred())
			_, err = s.Do(gympeer.Request{Op: gympeer.OpConsume, Dir: GinkgoT().TempDir(), RolloutID: "r1"})
			Expect(err).To(MatchError(ContainSubstring("Gym raised RuntimeError: stand-in consumer refuses r1")))
			_, err = s.Do(gympeer.Request{Op: "frobnicate"})
			Expect(err).To(MatchError(ContainSubstring("unknown op 'frobnicate'")))
			Expect(s.Close()).To(Succeed())

			_, err = peer.Once(context.Background(), gympeer.Request{Op: gympeer.OpConsume, Dir: GinkgoT().TempDir(), RolloutID: "r2"})
			Expect(err).To(MatchError(ContainSubstring("stand-in consumer refuses r2")))
		})
	})
})

// With a real Gym checkout, the driver runs Gym's consumer and store once on
// a tiny capture; without one this says how to run it.
var _ = Describe("against NeMo Gym", func() {
	var peer *gympeer.Peer
	BeforeEach(func() {
		var err error
		peer, err = gympeer.FromEnv(context.Background(), GinkgoT().TempDir())
		Expect(err).NotTo(HaveOccurred())
		if peer == nil {
			Skip(gympeer.NotConfigured)
		}
		Expect(peer.Reads(record.SchemaVersion)).To(Succeed())
	})

	It("consumes a capture of ours, and writes and reads records of ours byte for byte", func() {
		entries := tinyRollout("tiny-0", 3)
		var lines bytes.Buffer
		for _, e := range entries {
			line, err := e.MarshalCanonical()
			Expect(err).NotTo(HaveOccurred())
			lines.Write(append(line, '\n'))
		}
		src := GinkgoT().TempDir()
		Expect(os.WriteFile(filepath.Join(src, "tiny-0.tokens.jsonl"), lines.Bytes(), 0o600)).To(Succeed())

		proc, err := peer.Once(context.Background(), gympeer.Request{Op: gympeer.OpConsume, Dir: src, RolloutID: "tiny-0", Model: "pol"})
		Expect(err).NotTo(HaveOccurred())
		Expect(proc.Reply.BuildError).To(BeEmpty())
		Expect(proc.Reply.MaskSample).To(BeFalse())
		Expect(proc.Reply.NCalls).To(Equal(3))
		Expect(proc.Reply.Chains).To(Equal(1))
		Expect(proc.Reply.Secs()).To(BeNumerically(">", 0))
		Expect(proc.Wall.Seconds()).To(BeNumerically(">", proc.Reply.Secs()))

		in := filepath.Join(GinkgoT().TempDir(), "entries.jsonl")
		Expect(os.WriteFile(in, lines.Bytes(), 0o600)).To(Succeed())
		s, err := peer.Start(context.Background())
		Expect(err).NotTo(HaveOccurred())
		defer func() { Expect(s.Close()).To(Succeed()) }()
		for _, mode := range []string{gympeer.PutAsync, gympeer.PutThreads} {
			dst := GinkgoT().TempDir()
			rep, err := s.Do(gympeer.Request{Op: gympeer.OpPut, Dir: dst, EntriesFile: in, Mode: mode})
			Expect(err).NotTo(HaveOccurred())
			Expect(rep.Puts).To(Equal(3))
			Expect(os.ReadFile(filepath.Join(dst, "tiny-0.tokens.jsonl"))).To(Equal(lines.Bytes()), "Gym's file differs from ours")
			rep, err = s.Do(gympeer.Request{Op: gympeer.OpRead, Dir: dst, RolloutIDs: []string{"tiny-0"}})
			Expect(err).NotTo(HaveOccurred())
			got := rep.Rollouts["tiny-0"]
			Expect(got.ModelCallIDs).To(HaveLen(3))
			for i, line := range bytes.Split(bytes.TrimSuffix(lines.Bytes(), []byte("\n")), []byte("\n")) {
				sum := sha256.Sum256(line)
				Expect(got.EntryDigests[i]).To(Equal(hex.EncodeToString(sum[:])))
			}
		}
	})
})

// tinyRollout is n chained calls of one rollout, each prompt the previous
// prompt and generation plus two tool tokens.
func tinyRollout(id string, n int) []*record.Entry {
	var out []*record.Entry
	prompt := []int{151644, 872, 198}
	parent := ""
	for i := range n {
		gen := []int{1000 + i, 2000 + i}
		cum := append(append([]int{}, prompt...), gen...)
		digest, err := record.TokenDigest(cum)
		Expect(err).NotTo(HaveOccurred())
		cumLen, idx := len(cum), 0
		callID := hex.EncodeToString([]byte{byte(i + 1), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
		respID := "chatcmpl-" + callID
		res := record.ResolutionRoot
		e := &record.Entry{SchemaVersion: record.SchemaVersion, RolloutID: id, ModelCallID: callID, Model: "pol",
			PromptTokenIDs: prompt, GenerationTokenIDs: gen, GenerationLogProbs: []float64{-0.5, -1.25},
			OutputItems:    []record.Item{{"type": "message", "role": "assistant", "content": "turn"}},
			TokenItemIndex: &idx, ResponseID: &respID, CreatedAt: 1.7e9 + float64(i), CumLen: &cumLen, Digest: &digest}
		if parent != "" {
			res = record.ResolutionResolved
			p := parent
			e.ParentCallID = &p
		}
		e.ParentResolution = &res
		out = append(out, e)
		parent, prompt = callID, append(cum, 7, 8)
	}
	return out
}
