package natsstore_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/conformance"
	"github.com/capbench/capbench/internal/natstest"
)

// cluster is three in-process servers routed to each other, the shape
// deploy/k8s runs; the store uses replicas=3 on it.
var (
	clusterOnce sync.Once
	cluster     *natstest.Cluster
	clusterErr  error
	clusterDir  string
)

func threeServers() *natstest.Cluster {
	if testing.Short() {
		Skip("-short: no three-server cluster (it takes seconds to elect leaders)")
	}
	clusterOnce.Do(func() {
		clusterDir, clusterErr = os.MkdirTemp("", "natsstore-cluster-")
		if clusterErr == nil {
			cluster, clusterErr = natstest.StartCluster(clusterDir, 3)
		}
	})
	Expect(clusterErr).NotTo(HaveOccurred())
	return cluster
}

func stopCluster() {
	if cluster != nil {
		cluster.Stop()
		_ = os.RemoveAll(clusterDir)
	}
}

func clusterURL() string { return threeServers().URL() + "/?replicas=3" }

var _ = Describe("on a three-server cluster with replicas=3", Label("e2e", "cluster"), func() {
	BeforeEach(func() { threeServers() })

	conformance.DescribeConformance("NATS JetStream store (three servers, replicas=3)", factories(clusterURL))

	It("never loses an acknowledged record when a server is killed and restarted mid-load", Label("faults"), Serial, SpecTimeout(3*time.Minute), func(ctx SpecContext) {
		c := threeServers()
		victim := c.Nodes[1]
		base := fmt.Sprintf("cluster-fault-%d", time.Now().UnixNano())
		out := runLoad(ctx, clusterURL(), base, 4, 25, func() {
			time.Sleep(300 * time.Millisecond)
			victim.Stop()
			time.Sleep(2 * time.Second)
			Expect(victim.Restart()).To(Succeed())
		})
		rep := audit(ctx, clusterURL(), out)
		AddReportEntry("nats fault cluster node restart", rep.String())
		fmt.Fprintf(GinkgoWriter, "cluster node restart: %s\n", rep)
		Expect(rep.AckedLost).To(BeZero(), rep.String())
		Expect(rep.Duplicates).To(BeZero(), rep.String())
		Expect(rep.FailedButComplete).To(BeZero(), rep.String())
		Expect(rep.Acked).To(BeNumerically(">", 0), rep.String())
	})
})
