package figures

// Rows is the README's "Measured figures" table, in order: one struct
// literal per row (docs/figures.md says how to add or change one). A
// Figure template that names a benchmark or metric the run no longer
// reports fails `make figures` with the names the output does have.
func Rows() []Row {
	chaosRun := Run{ID: "chaos", Kind: CapbenchChaos, Args: []string{"chaos", "--duration", "30s", "--kills", "30", "--calls", "50000", "--concurrency", "16"}}
	return []Row{
		{
			Name: "stream-ttft",
			What: "time to first token, 250-token stream, fake at 20 ms TTFT + 2 ms/token, concurrency 1",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/proxy", "-run", "^$", "-bench", "StreamTTFT", "-benchtime", "8x"}}},
			Figure: `direct {{.Med "StreamTTFT" "direct-ttft-ms" | f 2}} ms; through the proxy {{.Med "StreamTTFT" "proxy-ttft-ms" | f 2}} ms` +
				` ({{.Med "StreamTTFT" "proxy-added-ttft-ms" | printf "%+.2f"}} ms); over the file store {{.Med "StreamTTFT" "proxy-file-ttft-ms" | f 2}} ms` +
				` ({{.Med "StreamTTFT" "file-added-ttft-ms" | printf "%+.2f"}} ms: the call intent is synced while the engine works on the first token); ` +
				"`--buffered-streams`" + ` (NeMo Gym's behaviour) {{.Med "StreamTTFT" "buffered-ttft-ms" | f 1}} ms`,
		},
		{
			Name: "consume-cold",
			What: "consumer: freeze + build + verdict of one 200-call rollout with prompts growing to 32k tokens (21 MB), cold from disk, in-process",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/consumer", "-run", "^$", "-bench", "ConsumeCold200x32k", "-benchtime", "20x"}}},
			Figure: `{{.Med "ConsumeCold200x32k" "cpu-ms/op" | f 0}} ms CPU per rollout ({{div (.Med "ConsumeCold200x32k" "ns/op") 1e6 | f 0}} ms wall).` +
				` {{if .Has "ConsumeCold200x32k" "x-gym"}}NeMo Gym's ` + "`trajectories_for_rollout`" + ` in the same run: {{.Med "ConsumeCold200x32k" "gym-ms" | f 0}} ms in Python, {{.Med "ConsumeCold200x32k" "x-gym" | f 1}}× our time` +
				`{{else}}Peer not rerun here (` + "`CAPBENCH_GYM_DIR`" + ` not set, docs/gym-peer.md): Gym's ` + "`trajectories_for_rollout`" + ` took 0.31–0.33 s on the same rollout in an earlier run{{end}}`,
		},
		{
			Name: "verdict-process",
			What: "read-only `capbench verdict --capture-dir DIR --json` of that rollout, whole process",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/consumer", "-run", "^$", "-bench", "JudgeCold200x32k", "-benchtime", "20x"}}},
			Figure: `{{.Med "JudgeCold200x32k" "proc-ms" | f 0}} ms wall per process ({{.Med "JudgeCold200x32k" "cpu-ms/op" | f 0}} ms CPU in-process);` +
				` {{if .Has "JudgeCold200x32k" "x-gym-proc"}}NeMo Gym as a process on the same rollout, same run: {{.Med "JudgeCold200x32k" "gym-proc-ms" | f 0}} ms, {{.Med "JudgeCold200x32k" "x-gym-proc" | f 1}}× our process` +
				`{{else}}Gym peer not rerun here (` + "`CAPBENCH_GYM_DIR`" + ` not set){{end}};` +
				` {{if .Has "JudgeCold200x32k" "proc-peak-MiB"}}peak RSS {{.Med "JudgeCold200x32k" "proc-peak-MiB" | f 1}} MiB ({{.Med "JudgeCold200x32k" "proc-peak/file" | f 2}}× the file){{else}}peak RSS not measured (no ` + "`/usr/bin/time`" + `){{end}}`,
		},
		{
			Name: "body-memory",
			What: "capture proxy request memory, one 1 MB / 29 MB Messages body",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/proxy", "-run", "^$", "-bench", "BenchmarkRequestBodyMemory", "-benchtime", "1x"}}},
			Figure: `{{.Med "RequestBodyMemory/messages-1MB" "alloc-B/body-B" | f 1}} / {{.Med "RequestBodyMemory/messages-29MB" "alloc-B/body-B" | f 1}}` +
				` bytes allocated per body byte (before the body work: 10.5–11)`,
		},
		{
			Name: "proxy-filestore",
			What: "capture proxy + file store, 64 rollouts × 50 small calls, against direct to the fake in the same run",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/proxy", "-run", "^$", "-bench", "ProxyFileStore", "-benchtime", "4000x"}}},
			Figure: `{{.Med "ProxyFileStore/rollouts=64/calls=50" "cpu-µs/call" | f 0}} µs CPU per captured call (direct {{.Med "ProxyFileStore/rollouts=64/calls=50" "direct-cpu-µs/call" | f 0}} µs);` +
				` {{.Med "ProxyFileStore/rollouts=64/calls=50" "calls/s" | k 1}} captured calls/s (direct {{.Med "ProxyFileStore/rollouts=64/calls=50" "direct-calls/s" | k 1}});` +
				` the same proxy over the memory store, same run: {{.Med "ProxyFileStore/rollouts=64/calls=50" "memory-calls/s" | k 1}} calls/s at {{.Med "ProxyFileStore/rollouts=64/calls=50" "memory-cpu-µs/call" | f 0}} µs CPU each,` +
				` the ceiling of any durable store on these CPUs, of which the file store makes {{.Med "ProxyFileStore/rollouts=64/calls=50" "x-memory" | f 2}}×;` +
				` {{.Med "ProxyFileStore/rollouts=64/calls=50" "x-fdatasync" | f 2}}× what two appends per call with an ` + "`fdatasync`" + ` each allow on this disk at the same concurrency;` +
				` a sync covered {{.Med "ProxyFileStore/rollouts=64/calls=50" "appends/sync" | f 1}} calls and one was running {{mul 100 (.Med "ProxyFileStore/rollouts=64/calls=50" "sync-busy") | f 0}}% of the time` +
				` (one rollout alone: {{.Med "ProxyFileStore/rollouts=1/calls=50" "calls/s" | k 2}} calls/s, {{.Med "ProxyFileStore/rollouts=1/calls=50" "x-fdatasync" | f 2}}× that peer);` +
				` with twice the CPUs' scheduler threads, as ` + "`capbench proxy`" + ` runs group sync (` + "`ProxyFileStoreProcs`" + `, alternating rounds):` +
				` {{.Med "ProxyFileStoreProcs/rollouts=64" "calls/s@2xcpus" | k 1}} vs {{.Med "ProxyFileStoreProcs/rollouts=64" "calls/s@cpus" | k 1}} calls/s ({{.Med "ProxyFileStoreProcs/rollouts=64" "2xcpus/cpus" | f 2}}×;` +
				` 16 rollouts {{.Med "ProxyFileStoreProcs/rollouts=16" "2xcpus/cpus" | f 2}}×, one alone {{.Med "ProxyFileStoreProcs/rollouts=1" "2xcpus/cpus" | f 2}}×)`,
		},
		{
			Name: "proxy-overhead",
			What: "capture proxy with the memory store, 16 concurrent small calls (chat, and Anthropic Messages), against direct to the fake, a TCP relay that only frames messages and a bare standard-library reverse proxy in front of it, six alternating rounds",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/proxy", "-run", "^$", "-bench", "ProxyOverheadRounds", "-benchtime", "5000x"}}},
			Figure: `{{.Med "ProxyOverheadRounds" "x-direct" | f 2}}× direct's throughput (rounds {{.Med "ProxyOverheadRounds" "x-direct-min" | f 2}}–{{.Med "ProxyOverheadRounds" "x-direct-max" | f 2}}), +{{.Med "ProxyOverheadRounds" "added-p50-µs" | f 0}} µs p50;` +
				` the second hop alone, relayed with nothing parsed: {{.Med "ProxyOverheadRounds" "relay-x-direct" | f 2}}×;` +
				` the bare reverse proxy alone: {{.Med "ProxyOverheadRounds" "bare-x-direct" | f 2}}×, +{{.Med "ProxyOverheadRounds" "bare-added-p50-µs" | f 0}} µs` +
				` (capture reaches {{.Med "ProxyOverheadRounds" "x-bare-proxy" | f 2}}× the bare proxy's throughput: every call gets a second HTTP server and client);` +
				` the same call in the Anthropic Messages dialect Claude Code sends, translated to chat: {{.Med "ProxyOverheadRounds" "messages-x-direct" | f 2}}×, +{{.Med "ProxyOverheadRounds" "messages-added-p50-µs" | f 0}} µs;` +
				` CPU per call, client, fake and proxy together: direct {{.Med "ProxyOverheadRounds" "direct-cpu-µs/call" | f 0}} µs, added by the relay {{.Med "ProxyOverheadRounds" "relay-added-cpu-µs/call" | f 0}} µs,` +
				` by the bare reverse proxy {{.Med "ProxyOverheadRounds" "bare-added-cpu-µs/call" | f 0}} µs, by capture {{.Med "ProxyOverheadRounds" "added-cpu-µs/call" | f 0}} µs (0.5× direct needs at most direct's own)`,
		},
		{
			Name: "long-rollout",
			What: "proxy's added cost at call 200 of a rollout growing to 31.5k prompt tokens, as a ratio to the direct call, proxy and direct alternating",
			// One rollout's figure moves with the machine; the benchmark reports the median over its rollouts.
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/proxy", "-run", "^$", "-bench", "BenchmarkLongRollout", "-benchtime", "5x"}}},
			Figure: `medians of 5 rollouts: memory store {{.Med "LongRollout/memory" "added/direct@200" | f 2}}× (was 8.7–11× when every call re-parsed the rollout);` +
				` the same conversation in the Anthropic Messages dialect {{.Med "LongRollout/messages" "added/direct@200" | f 2}}×;` +
				` file store {{.Med "LongRollout/file" "added/direct@200" | f 2}}× (the bare ` + "`fdatasync` of its record's line alone, between the calls: {{.Med \"LongRollout/file\" \"fsync-inline/direct@200\" | f 2}}×; back to back after them: {{.Med \"LongRollout/file\" \"fsync-floor/direct@200\" | f 2}}×);" +
				` file store with ` + "`--delta-records`" + ` {{.Med "LongRollout/file-delta" "added/direct@200" | f 2}}×`,
		},
		{
			Name: "proxy-uptime",
			What: "capture proxy + file store over a long uptime: 12,288 one-call rollouts, 16 at a time, live heap and descriptors after half of them and at the end; the same proxy with its rollout bounds lifted, in the same run",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/proxy", "-run", "^$", "-bench", "ProxyUptime", "-benchtime", "1x"}}},
			Figure: `heap {{.Med "ProxyUptime" "bounded-heap-MiB@half" | f 1}} → {{.Med "ProxyUptime" "bounded-heap-MiB@end" | f 1}} MiB ({{.Med "ProxyUptime" "bounded-heap-B/rollout" | f 0}} B per rollout over the second half),` +
				` descriptors {{.Med "ProxyUptime" "bounded-fds@half" | f 0}} → {{.Med "ProxyUptime" "bounded-fds@end" | f 0}};` +
				` without the bounds: {{.Med "ProxyUptime" "unbounded-heap-B/rollout" | f 0}} B and` +
				` {{div (sub (.Med "ProxyUptime" "unbounded-fds@half") (.Med "ProxyUptime" "unbounded-fds@end")) (mul -0.5 (.Med "ProxyUptime" "unbounded-rollouts")) | f 1}} descriptors more per rollout ever written` +
				` ({{.Med "ProxyUptime" "unbounded-fds@half" | f 0}} → {{.Med "ProxyUptime" "unbounded-fds@end" | f 0}} over {{.Med "ProxyUptime" "unbounded-rollouts" | f 0}} rollouts)`,
		},
		{
			Name: "resolve-read",
			What: "parent resolution at call 200 of a 32k-token rollout",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/store", "-run", "^$", "-bench", "ResolveRead200x32k", "-benchtime", "30x"}}},
			Figure: `{{div (.Med "ResolveRead200x32k/follower" "ns/op") 1e6 | f 2}} ms` +
				` (the whole-file re-read it replaced, same run: {{div (.Med "ResolveRead200x32k/whole-rollout" "ns/op") 1e6 | f 1}} ms)`,
		},
		{
			Name: "store-put",
			What: "file store put, 64 rollouts at once, against bare `fdatasync` per file and NeMo Gym's store in the same run",
			Runs: []Run{
				{Kind: GoTest, Args: []string{"test", "./capture/store", "-run", "^$", "-bench", "BenchmarkPut/lazy-state", "-benchtime", "8000x"}},
				{Kind: GoTest, Args: []string{"test", "./capture/store", "-run", "^$", "-bench", "PutVsGym/rollouts=64", "-benchtime", "6x"}},
			},
			Figure: `{{.Med "Put/lazy-state/rollouts=64" "puts/s" | k 1}} puts/s, {{.Med "Put/lazy-state/rollouts=64" "x-fdatasync" | f 2}}× the bare-` + "`fdatasync`" +
				` peer measured in the same run ({{.Med "Put/lazy-state/rollouts=64" "fdatasync-puts/s" | k 1}}/s);` +
				` {{if .Has "PutVsGym/rollouts=64" "x-gym"}}NeMo Gym's ` + "`TokenCaptureStore`" + ` on the same records, alternating rounds: {{.Med "PutVsGym/rollouts=64" "gym-puts/s" | k 1}} puts/s` +
				` vs our {{.Med "PutVsGym/rollouts=64" "puts/s" | k 1}} (Gym's time {{.Med "PutVsGym/rollouts=64" "x-gym" | f 1}}× ours; with ` + "`begin_call`" + ` before each put {{.Med "PutVsGym/rollouts=64/begin_call+put" "x-gym" | f 1}}×)` +
				`{{else}}NeMo Gym's store not rerun here (` + "`CAPBENCH_GYM_DIR`" + ` not set, docs/gym-peer.md; 1.4–1.6k puts/s in an earlier run){{end}}`,
		},
		{
			Name: "group-sync",
			What: "file store, 64 rollouts at once, a `begin_call` before each put: group sync (the default) vs one `fdatasync` per append (`--sync file`), alternating rounds",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/store", "-run", "^$", "-bench", "GroupSync", "-benchtime", "8x"}}},
			Figure: `{{.Med "GroupSync/rollouts=64" "group-calls/s" | k 1}} vs {{.Med "GroupSync/rollouts=64" "per-file-calls/s" | k 1}} calls/s: {{.Med "GroupSync/rollouts=64" "group/per-file" | f 2}}×;` +
				` 16 rollouts {{.Med "GroupSync/rollouts=16" "group/per-file" | f 2}}×, one rollout alone {{.Med "GroupSync/rollouts=1" "group/per-file" | f 2}}×`,
		},
		{
			Name: "file-create",
			What: "file store, new rollouts from 64 writers at once after the consumer retired the round before (a `begin_call` and a put per call): files linked from unnamed inodes while another creation runs (the default) vs every file created by name, alternating rounds",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/store", "-run", "^$", "-bench", "NewRollouts", "-benchtime", "6x"}}},
			Figure: `a new rollout every call: {{.Med "NewRollouts/writers=64/calls=1" "calls/s" | f 0}} vs {{.Med "NewRollouts/writers=64/calls=1" "by-name-calls/s" | f 0}} calls/s ({{.Med "NewRollouts/writers=64/calls=1" "linked/by-name" | f 2}}×),` +
				` {{.Med "NewRollouts/writers=64/calls=1" "cpu-µs/call" | f 0}} vs {{.Med "NewRollouts/writers=64/calls=1" "by-name-cpu-µs/call" | f 0}} µs CPU per call;` +
				` every 50 calls: {{.Med "NewRollouts/writers=64/calls=50" "linked/by-name" | f 2}}×; one writer alone (by name both ways): {{.Med "NewRollouts/writers=1/calls=1" "linked/by-name" | f 2}}×`,
		},
		{
			Name: "nats-put",
			What: "NATS JetStream store vs file store, puts/s, same run",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./capture/store/natsstore", "-run", "^$", "-bench", "BenchmarkPut", "-benchtime", "1s", "-count", "3"}}},
			Figure: `NATS over file, medians of 3: 1 writer 3.4 KB: {{div (.Med "Put/record=small/writers=1/calls=50/store=nats" "puts/s") (.Med "Put/record=small/writers=1/calls=50/store=file" "puts/s") | f 2}}×;` +
				` 16 writers: {{div (.Med "Put/record=small/writers=16/calls=50/store=nats" "puts/s") (.Med "Put/record=small/writers=16/calls=50/store=file" "puts/s") | f 2}}×;` +
				` 32k-token records, 16 writers: {{div (.Med "Put/record=32k-tokens/writers=16/calls=50/store=nats" "puts/s") (.Med "Put/record=32k-tokens/writers=16/calls=50/store=file" "puts/s") | f 2}}×`,
		},
		{
			Name: "fake-vs-trivial",
			What: "fake vLLM vs a trivial Go server, non-streaming, concurrency 64, same run",
			Runs: []Run{
				{Kind: GoTest, Args: []string{"test", "./fakes/vllm", "-run", "^$", "-bench", "NonStreamingVsTrivial", "-benchtime", "150x", "-count", "6"}},
				{Kind: GoTest, Args: []string{"test", "./fakes/vllm", "-run", "^$", "-bench", "ChatHandler", "-benchmem"}},
			},
			Figure: `{{.Span "NonStreamingVsTrivial" "fake/trivial" 2}}× the trivial server (median {{.Med "NonStreamingVsTrivial" "fake/trivial" | f 2}}×);` +
				` the fake's handler {{div (.Med "ChatHandler" "ns/op") 1e3 | f 1}} µs and {{.Med "ChatHandler" "allocs/op" | f 0}} allocations per request (` + "`BenchmarkChatHandler`)",
		},
		{
			Name: "fake-ledger",
			What: "fake vLLM over a long load test: 1,200 chat calls with 27k-token prompts, live heap after half of them and at the end, the ledger bounded at 16 MiB (`--ledger-max-bytes`; 256 MiB by default) and, in the same run, without a byte bound",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./fakes/vllm", "-run", "^$", "-bench", "LedgerUptime", "-benchtime", "1x"}}},
			Figure: `bounded: heap {{.Med "LedgerUptime" "bounded-heap-MiB@half" | f 1}} → {{.Med "LedgerUptime" "bounded-heap-MiB@end" | f 1}} MiB` +
				` ({{.Med "LedgerUptime" "bounded-heap-B/call" | f 0}} B per call over the second half; the ledger holds {{.Med "LedgerUptime" "bounded-ledger-MiB" | f 1}} MiB, most of the rest is the fake's prompt cache, bounded at 32 MiB);` +
				` without the bound: {{div (.Med "LedgerUptime" "unbounded-heap-B/call") 1e3 | f 1}} KB more per call ({{.Med "LedgerUptime" "unbounded-heap-MiB@half" | f 0}} → {{.Med "LedgerUptime" "unbounded-heap-MiB@end" | f 0}} MiB)`,
		},
		{
			Name: "llm-d-sim",
			What: "fake vLLM vs llm-d-inference-sim (built from its public source, `--force-dummy-tokenizer`), each its own process, concurrency 64, 16 tokens a call, alternating bursts from one raw keep-alive client",
			Runs: []Run{{Kind: GoTest, Args: []string{"test", "./fakes/vllm", "-run", "^$", "-bench", "FakeVsInferenceSim", "-benchtime", "20x"}}},
			Figure: `{{if .Has "FakeVsInferenceSim/stream=false" "fake/sim"}}non-streaming {{.Med "FakeVsInferenceSim/stream=false" "fake-req/s" | k 1}} vs {{.Med "FakeVsInferenceSim/stream=false" "sim-req/s" | k 1}} req/s ({{.Med "FakeVsInferenceSim/stream=false" "fake/sim" | f 1}}×);` +
				` streaming {{.Med "FakeVsInferenceSim/stream=true" "fake-tok/s" | k 0}} vs {{.Med "FakeVsInferenceSim/stream=true" "sim-tok/s" | k 0}} tok/s ({{.Med "FakeVsInferenceSim/stream=true" "fake/sim" | f 1}}×)` +
				`{{else}}the fake alone: {{.Med "FakeVsInferenceSim/stream=false" "fake-req/s" | k 1}} req/s non-streaming, {{.Med "FakeVsInferenceSim/stream=true" "fake-tok/s" | k 0}} tok/s streaming;` +
				" the peer not rerun here (`CAPBENCH_SIM_BIN` not set, docs/inference-sim-peer.md; an earlier run: 1.8× and 2.6×){{end}}",
		},
		{
			Name:    "shards",
			What:    "3 shards vs one process, Poisson 100 req/s, 600 requests, one fake (20 ms TTFT, 2 ms/token, 16 tokens)",
			Command: "`capbench bench --url … --arrival poisson --rate 100 --requests 600 --concurrency 0 --max-tokens 16` (`--shard I/3 --start-at T`, then `capbench merge`)",
			Runs: []Run{{Kind: CapbenchShards, Shards: 3, Args: []string{"--arrival", "poisson", "--rate", "100", "--requests", "600", "--concurrency", "0", "--max-tokens", "16"},
				Fake: []string{"--ttft", "20ms", "--inter-token-latency", "2ms", "--output-len-mean", "16"}}},
			Figure: `scheduled arrivals {{if .SameSchedule}}identical{{else}}DIFFERENT{{end}};` +
				` TTFT p50 {{(.Summary "target").TTFT.P50 | f 1}} vs {{(.SingleSummary "target").TTFT.P50 | f 1}} ms,` +
				` E2EL p50 {{(.Summary "target").E2EL.P50 | f 1}} vs {{(.SingleSummary "target").E2EL.P50 | f 1}} ms,` +
				` {{(.Summary "target").RequestThroughput | f 2}} vs {{(.SingleSummary "target").RequestThroughput | f 2}} req/s; shard start lag {{.StartLagSpan 2}} ms`,
		},
		{
			Name:    "chaos-kill",
			What:    "chaos: kill -9 of the proxy ×30 under load (16 callers, 30 s)",
			Command: "`make chaos`",
			Runs:    []Run{chaosRun},
			Figure: `{{with .Scenario "kill -9"}}{{.Acknowledged | comma}} acknowledged calls, {{.Stored | comma}} stored, {{.Lost}} lost, {{.Corrupt}} corrupt;` +
				` peak RSS {{mib .PeakRSSBytes}} MiB{{end}}`,
		},
		{
			Name:    "chaos-idle-conns",
			What:    "chaos: 1,100 idle connections against the proxy (descriptor limit 825)",
			Command: "`make chaos`",
			Runs:    []Run{chaosRun},
			Figure: `{{with .Scenario "slow-client flood"}}{{.Acknowledged | comma}} real calls served ({{.Load}}), {{.Lost}} lost{{end}}` +
				` (before the limits, in an earlier run: 8 calls in 24 s)`,
		},
		{
			Name:    "chaos-watch",
			What:    "chaos: 50k-call memory and descriptor watch",
			Command: "`make chaos`",
			Runs:    []Run{chaosRun},
			Figure: `{{with .Scenario "memory and descriptor watch"}}{{.Acknowledged | comma}} acknowledged, {{.Stored | comma}} stored;` +
				` RSS {{mib .Usage.RSSBefore}} → {{mib .Usage.RSSAfter}} MiB, descriptors {{.Usage.FDsBefore}} → {{.Usage.FDsPeak}} → {{.Usage.FDsAfter}}{{end}}`,
		},
		{
			Name: "bench-overhead",
			What: "capture overhead, embedded fake with its timing model (0.1× real time), c=8, 200 requests each way, paired",
			Runs: []Run{{Kind: CapbenchBench, Args: []string{"bench", "--time-scale", "0.1", "--slo", "ttft=2s,tpot=50ms"}}},
			Figure: `TTFT through capture {{(.Summary "proxy").TTFT.P50 | f 1}} ms vs {{(.Summary "direct").TTFT.P50 | f 1}} ms direct` +
				` ({{.Overhead.AddedTTFTMS.Value | printf "%+.2f"}} ms per pair); {{with .Overhead}}E2EL ratio {{.E2ELRatio.Value | f 3}} [{{.E2ELRatio.Low | f 3}}, {{.E2ELRatio.High | f 3}}]{{end}};` +
				` {{with .Result.Capture}}{{.Records}}/{{.ProxiedOK}} captured, {{.FidelityExact}}/{{.FidelityCalls}} exact against the {{.FidelityMethod}}{{end}}`,
		},
		{
			Name: "bench-buffered",
			What: "the same with NeMo Gym's buffered streams",
			Runs: []Run{{Kind: CapbenchBench, Args: []string{"bench", "--time-scale", "0.1", "--requests", "100", "--buffered-streams"}}},
			Figure: `TTFT through capture {{(.Summary "proxy").TTFT.P50 | f 0}} ms vs {{(.Summary "direct").TTFT.P50 | f 1}} ms direct:` +
				` {{mul .Overhead.BufferedTTFT 100 | f 0}}% of first chunks at the end of the call (TTFT = E2EL)`,
		},
		{
			Name: "bench-zero-latency",
			What: "capture path's own cost: zero-latency fake, c=16, 3 rounds of 2000 pairs",
			Runs: []Run{{Kind: CapbenchBench, Args: []string{"bench", "--concurrency", "16", "--requests", "2000", "--rounds", "3"}}},
			Figure: `+{{.OverheadSpan "added_e2el_ms" 1}} ms p50 per call over the rounds ({{.OverheadSpan "e2el_ratio" 1}}× a microsecond fake): the file store making each call durable;` +
				` {{with .Result.Capture}}{{.Records}}/{{.ProxiedOK}} captured, {{.FidelityExact}}/{{.FidelityCalls}} exact{{end}}` +
				`{{with .Result.CaptureSyncs}}; {{.AppendsPerSync | f 1}} appends per sync (a streamed call syncs its intent and its record), a sync running {{mul .BusyShare 100 | f 0}}% of the load{{end}}`,
		},
		{
			Name: "bench-kv-knee",
			What: "KV-cache knee, 48 GiB Qwen3-4B-Thinking, 26.7k-token prompts",
			Runs: []Run{{Kind: CapbenchBench, Args: []string{"bench", "--sweep", "concurrency=4,6,7,8,9,10,12", "--prompt-tokens", "26700", "--max-tokens", "256", "--paths", "direct",
				"--time-scale", "0.3", "--requests", "44", "--warmup-requests", "6", "--cooldown-requests", "6"}}},
			Figure: `{{with .Result.Knee}}throughput flat from c={{.X}} ({{$.KneeAt .X | f 0}} tok/s; best {{.Max | f 0}});` +
				" `capbench plan`'s math fits {{.Predicted}} such requests: the knee is {{div (sub .X .Predicted) .Predicted | mul 100 | printf \"%+.0f\"}}% from it (the spec allows 15%){{end}}",
		},
		{
			Name: "bench-sessions",
			What: "Claude-Code-shaped sessions through capture",
			Runs: []Run{{Kind: CapbenchBench, Args: []string{"bench", "--workload", "sessions", "--sessions", "8", "--concurrency", "4"}}},
			Figure: `{{with .Sessions}}{{.Sessions}} sessions, {{.Calls}} calls, prompts up to {{.MaxPromptTokens | comma}} tokens, {{.Masked}} masked,` +
				` {{.Exact}}/{{.Checked}} calls exact{{end}}`,
		},
		{
			Name:   "loadgen-vs-wrk",
			What:   "load generator vs `wrk`, 64 connections, trivial server in its own process, both POSTing the same body",
			Runs:   []Run{{Kind: GoTest, Args: []string{"test", "./bench", "-run", "xxx", "-bench", "LoadGeneratorVsWrk", "-benchtime", "1x"}}},
			Figure: `plain {{.Med "LoadGeneratorVsWrk/plain" "ratio" | f 2}}× wrk's req/s ({{.Med "LoadGeneratorVsWrk/plain" "capbench-cpu-µs/req" | f 1}} µs of generator CPU per request); 64-chunk SSE streams {{.Med "LoadGeneratorVsWrk/stream" "ratio" | f 2}}× wrk ({{.Med "LoadGeneratorVsWrk/stream" "capbench-cpu-µs/req" | f 1}} µs per request)`,
		},
	}
}
