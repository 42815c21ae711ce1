package proxy_test

import (
	"net/http"
	"runtime"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("request body memory", func() {
	// One large Messages call on the capture path allocates a small
	// multiple of its body: read once, decoded once, the engine request
	// encoded once into a buffer of the right size, fingerprints hashed
	// without copying the conversation.
	It("allocates at most 5 bytes per body byte for an 8 MB Messages call", func(ctx SpecContext) {
		engine, err := cannedEngine()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(engine.Close)
		st := store.NewMemoryStore()
		p := startProxy(ctx, engine.URL, st, func(o *proxy.Options) { o.RequestTokenIDs = true; o.MaxBodyBytes = 32 << 20 })
		body := messagesBody(8 << 20)
		call := func(rollout string) {
			r := do(ctx, "POST", p.URL()+"/ng-rollout/"+rollout+"/training-token-capture/v1/messages", body, nil)
			Expect(r.Status).To(Equal(http.StatusOK), string(r.Body))
		}
		call("warm") // connection pools and lazily built state
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		call("measured")
		runtime.ReadMemStats(&after)
		perByte := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(body))
		GinkgoWriter.Printf("%.2f bytes allocated per body byte\n", perByte)
		Expect(perByte).To(BeNumerically("<=", 5))
		Expect(entries(ctx, st, "measured")).To(HaveLen(1))
	})
})
