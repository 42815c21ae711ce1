// Package tinybench is one tiny benchmark the figures suite runs end to end
// through go test (testdata: not part of ./...).
package tinybench

import "testing"

func BenchmarkTiny(b *testing.B) {
	for b.Loop() {
	}
	b.ReportMetric(42, "answers/op")
}
