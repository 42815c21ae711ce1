package proxy_test

import (
	"bufio"
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/store"
)

var _ = Describe("a proxy process killed under load", Label("process"), func() {
	It("loses no acknowledged call: every 200 it sent is a record on disk", func(ctx SpecContext) {
		if testing.Short() {
			Skip("builds and starts processes; skipped with -short")
		}
		bin := filepath.Join(GinkgoT().TempDir(), "capbench")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/capbench/capbench/cmd/capbench").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		fake := startFake()
		dir := GinkgoT().TempDir()
		const workers, rounds = 16, 3
		acked := make([]atomic.Int64, workers*rounds)
		client := &http.Client{Timeout: 10 * time.Second}
		for round := range rounds {
			cmd := exec.CommandContext(ctx, bin, "proxy", "--upstream", fake.URL(), "--capture-dir", dir, "--port", "0", "--log-level", "error")
			stdout, err := cmd.StdoutPipe()
			Expect(err).NotTo(HaveOccurred())
			Expect(cmd.Start()).To(Succeed())
			url := make(chan string, 1)
			go func() {
				re := regexp.MustCompile(`capture proxy at (http://\S+)`)
				for sc := bufio.NewScanner(stdout); sc.Scan(); {
					if m := re.FindStringSubmatch(sc.Text()); m != nil {
						url <- m[1]
					}
				}
			}()
			var base string
			Eventually(url, 30*time.Second).Should(Receive(&base))
			var wg sync.WaitGroup
			for w := range workers {
				slot := round*workers + w
				wg.Go(func() {
					for i := 0; ; i++ {
						body := mustJSON(map[string]any{"model": "policy", "messages": []any{
							map[string]any{"role": "user", "content": fmt.Sprintf("call %d", i)}}})
						resp, err := client.Post(fmt.Sprintf("%s/ng-rollout/kill-%d/training-token-capture/v1/chat/completions", base, slot),
							"application/json", bytes.NewReader(body))
						if err != nil {
							return // the proxy is gone
						}
						_ = resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							acked[slot].Add(1)
						}
					}
				})
			}
			time.Sleep(time.Duration(300+200*round) * time.Millisecond)
			Expect(cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
			_ = cmd.Wait()
			wg.Wait()
		}
		fs, err := store.NewFileStore(dir)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(fs.Close)
		total := int64(0)
		for slot := range acked {
			snap, err := fs.Freeze(ctx, fmt.Sprintf("kill-%d", slot))
			Expect(err).NotTo(HaveOccurred(), "rollout %d must read back line by line", slot)
			n := acked[slot].Load()
			total += n
			// A call cut by the kill may be stored without its 200 having
			// arrived; an acknowledged one is always stored.
			Expect(int64(len(snap.Entries))).To(BeNumerically(">=", n), "rollout %d", slot)
			Expect(int64(len(snap.Entries))).To(BeNumerically("<=", n+1), "rollout %d", slot)
		}
		Expect(total).To(BeNumerically(">", 50), "the load must have acknowledged calls")
		GinkgoWriter.Printf("acknowledged %d calls over %d kills, none lost\n", total, rounds)
	}, SpecTimeout(3*time.Minute))
})
