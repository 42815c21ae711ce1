package natsstore_test

import (
	"github.com/capbench/capbench/capture/conformance"
)

// The kit, unchanged, against fresh clients of the in-process server.
var _ = conformance.DescribeConformance("NATS JetStream store (in-process server)",
	factories(func() string { return embedded.URL() }))
