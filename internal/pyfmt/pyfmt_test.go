package pyfmt_test

import (
	"math"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/internal/pyfmt"
)

// The expected texts are what CPython 3 prints for repr(x) and json.dumps(x).
var _ = DescribeTable("Float is Python's repr(float)",
	func(f float64, want string) { Expect(pyfmt.Float(f)).To(Equal(want)) },
	Entry("zero", 0.0, "0.0"),
	Entry("negative zero", math.Copysign(0, -1), "-0.0"),
	Entry("integral", 1.0, "1.0"),
	Entry("large integral below 1e16", 1234567.0, "1234567.0"),
	Entry("just below 1e16", 9999999999999998.0, "9999999999999998.0"),
	Entry("1e16", 1e16, "1e+16"),
	Entry("1.5e16", 1.5e16, "1.5e+16"),
	Entry("1e-4 stays positional", 1e-4, "0.0001"),
	Entry("1e-5", 1e-5, "1e-05"),
	Entry("small negative", -3.25e-05, "-3.25e-05"),
	Entry("a log-prob", -0.0014757919125258923, "-0.0014757919125258923"),
	Entry("a fraction", 0.7273, "0.7273"),
	Entry("smallest subnormal", 5e-324, "5e-324"),
	Entry("max float", math.MaxFloat64, "1.7976931348623157e+308"),
	Entry("nan", math.NaN(), "nan"),
	Entry("inf", math.Inf(1), "inf"),
	Entry("-inf", math.Inf(-1), "-inf"),
)

var _ = DescribeTable("JSONFloat is Python's json.dumps of a float",
	func(f float64, want string) { Expect(pyfmt.JSONFloat(f)).To(Equal(want)) },
	Entry("finite", 2.5, "2.5"),
	Entry("nan", math.NaN(), "NaN"),
	Entry("inf", math.Inf(1), "Infinity"),
	Entry("-inf", math.Inf(-1), "-Infinity"),
)

var _ = DescribeTable("Str is Python's repr(str)",
	func(s, want string) { Expect(pyfmt.Str(s)).To(Equal(want)) },
	Entry("plain", "abc", "'abc'"),
	Entry("single quote inside", "it's", `"it's"`),
	Entry("both quotes", `it's "x"`, `'it\'s "x"'`),
	Entry("newline and tab", "a\nb\tc", `'a\nb\tc'`),
	Entry("backslash", `a\b`, `'a\\b'`),
	Entry("control character", "a\x01b", `'a\x01b'`),
	Entry("non-ASCII kept", "é", "'é'"),
)

var _ = DescribeTable(`Thousands is Python's f"{n:,}"`,
	func(n int64, want string) { Expect(pyfmt.Thousands(n)).To(Equal(want)) },
	Entry("under a thousand", int64(999), "999"),
	Entry("zero", int64(0), "0"),
	Entry("a thousand", int64(1000), "1,000"),
	Entry("millions", int64(262144000), "262,144,000"),
	Entry("negative", int64(-55521), "-55,521"),
)
