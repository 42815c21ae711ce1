package proxy_test

import (
	"net/http"
	"os"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("a rollout id too long for the store's file names", func() {
	It("is a 400 before anything is written", func(ctx SpecContext) {
		dir := GinkgoT().TempDir()
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		p := startProxy(ctx, startFake().URL(), fs, nil)
		body := mustJSON(map[string]any{"model": "policy", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		id := strings.Repeat("r", store.MaxRolloutIDLen+1)
		r := do(ctx, "POST", p.URL()+"/ng-rollout/"+id+"/training-token-capture/v1/chat/completions", body, nil)
		Expect(r.Status).To(Equal(http.StatusBadRequest), string(r.Body))
		Expect(string(r.Body)).To(ContainSubstring("at most 237"))
		names, err := os.ReadDir(dir)
		Expect(err).NotTo(HaveOccurred())
		Expect(names).To(BeEmpty())
	})
})
