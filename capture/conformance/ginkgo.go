package conformance

import (
	"context"

	"github.com/onsi/ginkgo/v2"
)

// DescribeConformance registers the kit as Ginkgo specs, one per check, each
// on its own rollout id and with its own fresh client instances (closed when
// the spec ends). Call it from a package-level var in a test file:
//
//	var _ = conformance.DescribeConformance("file store", factories)
//
// The lineage checks are skipped when f has no resolver factory.
func DescribeConformance(name string, f Factories) bool {
	return ginkgo.Describe("conformance kit: "+name, func() {
		for _, c := range checks() {
			ginkgo.It(c.name, func(ctx context.Context) {
				if c.needsResolver && f.NewResolver == nil {
					ginkgo.Skip("no resolver factory: " + c.name + " needs one")
				}
				if err := RunCheck(ctx, f, c.name, CheckRolloutID(DefaultRolloutID, c.name)); err != nil {
					ginkgo.Fail(err.Error())
				}
			})
		}
	})
}
