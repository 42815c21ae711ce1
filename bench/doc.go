// Package bench generates load against an HTTP endpoint (the fake vLLM, the
// capture proxy or a real vLLM) and summarises it: a closed loop of workers,
// each sending one request at a time, with latencies recorded in HDR
// histograms so percentiles stay exact to three significant digits.
//
// Results are plain data with a versioned JSON form so that reports and
// comparisons can reuse them.
package bench
