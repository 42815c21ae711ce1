package proxy_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
)

// startProxyProcess runs `capbench proxy` as its own process and returns its
// URL, read from the line it prints once it listens.
func startProxyProcess(ctx context.Context, bin, upstream, captureDir string) string {
	cmd := exec.CommandContext(ctx, bin, "proxy", "--upstream", upstream, "--capture-dir", captureDir, "--port", "0", "--log-level", "warn")
	stdout, err := cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	cmd.Stderr = GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	DeferCleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	urls := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`capture proxy at (http://\S+)`)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
	}()
	select {
	case u := <-urls:
		return u
	case <-time.After(30 * time.Second):
		Fail("capbench proxy did not report its address")
		return ""
	}
}

var _ = Describe("two proxy processes writing one rollout", Label("process"), func() {
	It("leave an intact file holding every call exactly once, as the engine generated it", func(ctx SpecContext) {
		if testing.Short() {
			Skip("builds and starts processes; skipped with -short")
		}
		bin := filepath.Join(GinkgoT().TempDir(), "capbench")
		build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/capbench/capbench/cmd/capbench")
		out, err := build.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))

		fake := startFake()
		dir := GinkgoT().TempDir()
		proxies := []string{
			startProxyProcess(ctx, bin, fake.URL(), dir),
			startProxyProcess(ctx, bin, fake.URL(), dir),
		}

		const perProxy = 16
		var wg sync.WaitGroup
		errs := make(chan error, 2*perProxy)
		for pi, base := range proxies {
			for i := 0; i < perProxy; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer GinkgoRecover()
					body := mustJSON(map[string]any{"model": "policy", "messages": []any{
						map[string]any{"role": "user", "content": fmt.Sprintf("question %d from proxy %d", i, pi)},
					}})
					r := do(ctx, "POST", base+"/ng-rollout/shared-1/training-token-capture/v1/chat/completions", body, nil)
					if r.Status != 200 {
						errs <- fmt.Errorf("proxy %d call %d: status %d: %s", pi, i, r.Status, r.Body)
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred())
		}

		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		snap, err := fs.Freeze(ctx, "shared-1")
		Expect(err).NotTo(HaveOccurred(), "the file must parse line by line")
		Expect(snap.Incomplete).To(BeFalse())
		Expect(snap.Entries).To(HaveLen(2 * perProxy))

		seen := map[string]bool{}
		ledger := fake.Ledger()
		Expect(ledger).To(HaveLen(2 * perProxy))
		for _, e := range snap.Entries {
			Expect(seen).NotTo(HaveKey(e.ModelCallID), "call %s recorded twice", e.ModelCallID)
			seen[e.ModelCallID] = true
			found := false
			for _, l := range ledger {
				if fmt.Sprint(l.PromptTokenIDs) == fmt.Sprint(e.PromptTokenIDs) {
					Expect(e.GenerationTokenIDs).To(Equal(l.GeneratedTokenIDs))
					Expect(e.GenerationLogProbs).To(Equal(l.LogProbs))
					found = true
				}
			}
			Expect(found).To(BeTrue(), "call %s has no generation in the engine's ledger", e.ModelCallID)
		}
	}, SpecTimeout(3*time.Minute))
})
