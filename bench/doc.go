// Package bench generates load against a Chat Completions or Messages
// endpoint (the fake vLLM, the capture proxy, a real vLLM or another capture
// proxy) and keeps one Sample per request. Every summary is computed from the
// samples (HDR histograms for percentiles), so reports and comparisons can
// re-slice a run; docs/bench-results.md defines the result format and every
// metric.
//
// Shapes: a closed loop at a concurrency, an open loop at a rate (constant,
// Poisson or gamma arrivals) and sweeps over either. Workloads: single calls
// with prompt and output length distributions, and agent-shaped sessions.
package bench
