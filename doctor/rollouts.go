package doctor

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// RolloutRow is one result row as the first-run check sees it.
type RolloutRow struct {
	Line       int     `json:"line"`
	ID         string  `json:"rollout_id"`
	HasCapture bool    `json:"has_token_capture"`
	Masked     bool    `json:"mask_sample"`
	NCalls     int     `json:"n_calls"`
	Chains     int     `json:"chains"`
	Chain      string  `json:"terminal_chain"`
	Delivered  float64 `json:"delivered_fraction"`
	// Records is the number of token records the capture directory holds
	// for this rollout (-1 without --capture-dir).
	Records int `json:"records"`
	// Healthy is the documented first-run outcome for this row.
	Healthy bool `json:"healthy"`
}

// Aggregate sums the rows.
type Aggregate struct {
	Rows        int     `json:"rows"`
	WithCapture int     `json:"with_token_capture"`
	Masked      int     `json:"masked"`
	OneCall     int     `json:"one_call"`
	Healthy     int     `json:"healthy"`
	MeanCalls   float64 `json:"mean_n_calls"`
}

// RolloutOptions tune the rollouts check.
type RolloutOptions struct {
	// CaptureDir is the capture store directory behind the rows; read-only.
	CaptureDir string
	// ExpectTools says the tasks use tools, so one call per rollout is a
	// failure rather than a note.
	ExpectTools bool
}

// CheckRolloutsFile reads a rollouts JSONL file and checks every row.
func CheckRolloutsFile(path string, o RolloutOptions) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rollouts: %w", err)
	}
	defer f.Close()
	r, err := CheckRollouts(f, o)
	if err != nil {
		return nil, fmt.Errorf("rollouts %s: %w", path, err)
	}
	r.Target = path
	for i := range r.Findings {
		r.Findings[i].File = path
	}
	r.Sort()
	return r, nil
}

// CheckRollouts checks every JSONL row read from in. A line that is not a
// JSON object is a finding, not an error; an empty input is an error.
func CheckRollouts(in io.Reader, o RolloutOptions) (*Report, error) {
	rep := NewReport("rollouts", "")
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 1<<20), 256<<20)
	agg := &Aggregate{}
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var rec map[string]any
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.UseNumber()
		if err := dec.Decode(&rec); err != nil || rec == nil {
			rep.Add(Finding{Rule: "rollouts/not-json", Severity: Error, Line: n,
				Message: fmt.Sprintf("line %d is not a JSON object: %v", n, err),
				Fix:     "rollouts files hold one JSON object per line, as `gym eval run --output` writes them"})
			continue
		}
		row, fs := checkRow(rec, n, o)
		rep.Add(fs...)
		rep.Rollouts = append(rep.Rollouts, row)
		agg.add(row)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if agg.Rows == 0 && len(rep.Findings) == 0 {
		return nil, fmt.Errorf("no rows: the file is empty")
	}
	if agg.Rows > 0 {
		agg.MeanCalls /= float64(agg.Rows)
	}
	rep.Aggregate = agg
	rep.Add(aggregateFindings(agg, o)...)
	return rep, nil
}

func (a *Aggregate) add(r RolloutRow) {
	a.Rows++
	if r.HasCapture {
		a.WithCapture++
		a.MeanCalls += float64(r.NCalls)
		if r.NCalls == 1 {
			a.OneCall++
		}
	}
	if r.Masked {
		a.Masked++
	}
	if r.Healthy {
		a.Healthy++
	}
}

func aggregateFindings(a *Aggregate, o RolloutOptions) []Finding {
	var out []Finding
	if a.Rows > 1 && a.WithCapture == 0 {
		out = append(out, Finding{Rule: "rollouts/no-capture-anywhere", Severity: Error,
			Message: fmt.Sprintf("none of the %d rows carries _ng_token_capture", a.Rows),
			Cause:   causeNoCapture, Fix: fixNoCapture})
	}
	if a.WithCapture > 1 && a.OneCall == a.WithCapture {
		sev, msg := Info, "every rollout made exactly one model call; if the tasks use tools, the harness never ran one"
		if o.ExpectTools {
			sev, msg = Error, fmt.Sprintf("every rollout (%d) made exactly one model call although tools were expected", a.WithCapture)
		}
		out = append(out, Finding{Rule: "rollouts/one-call-everywhere", Severity: sev, Message: msg, Cause: causeOneCall, Fix: fixOneCall})
	}
	return out
}

// Causes and fixes in the words of docs/doctor.md.
const (
	causeNoCapture = "the collector was not given the overlay (`gym eval run --no-serve` reads capture settings from its own --config), capture is disabled, the agent is not opted in, or the harness's base URL lacks /ng-rollout/<id>/training-token-capture"
	fixNoCapture   = "pass the same overlay to `gym env start` and `gym eval run --no-serve`; set token_id_capture.enabled and opt the agent in; give the harness the full capture base URL"
	causeOneCall   = "vLLM was started without --enable-auto-tool-choice and/or --tool-call-parser (NeMo RL: http_server_serving_chat_kwargs.enable_auto_tools and tool_parser), so tool calls stay text"
	fixOneCall     = "start vLLM with both --enable-auto-tool-choice and --tool-call-parser hermes"
)

func rolloutID(rec map[string]any) string {
	if s, ok := rec["_ng_rollout_id"].(string); ok && s != "" {
		return s
	}
	t, ok1 := rec["_ng_task_index"].(json.Number)
	r, ok2 := rec["_ng_rollout_index"].(json.Number)
	if ok1 && ok2 {
		return t.String() + "-" + r.String()
	}
	return ""
}

func num(m map[string]any, key string) (float64, bool) {
	v, ok := m[key].(json.Number)
	if !ok {
		return 0, false
	}
	f, err := v.Float64()
	return f, err == nil
}

func checkRow(rec map[string]any, line int, o RolloutOptions) (RolloutRow, []Finding) {
	row := RolloutRow{Line: line, ID: rolloutID(rec), Records: -1}
	subject := row.ID
	if subject == "" {
		subject = "line " + strconv.Itoa(line)
	}
	var out []Finding
	add := func(rule string, sev Severity, msg, cause, fix string) {
		out = append(out, Finding{Rule: rule, Severity: sev, Line: line, Subject: subject, Message: msg, Cause: cause, Fix: fix})
	}
	if o.CaptureDir != "" && row.ID != "" {
		row.Records = countRecords(o.CaptureDir, row.ID)
	}
	switch m := rec["mask_sample"].(type) {
	case nil:
	case bool:
		row.Masked = m
	default:
		row.Masked = true
		add("rollouts/mask-not-bool", Error, fmt.Sprintf("mask_sample is %v, not a boolean", m), "a finalizer that is not Gym's", "mask_sample must be true or absent")
	}
	capRaw, present := rec["_ng_token_capture"]
	capture, _ := capRaw.(map[string]any)
	if !present || capture == nil {
		if row.Masked {
			add("rollouts/masked-without-metrics", Error, "mask_sample is set but _ng_token_capture is missing", "a finalizer that masks without attaching metrics", "re-run delivery with Gym's collector or `capbench verdict --rollouts`")
		}
		switch {
		case row.Records > 0:
			add("rollouts/text-only", Error,
				fmt.Sprintf("no _ng_token_capture, but the capture directory holds %d record(s) for %s: the calls were captured and the row is text-only", row.Records, row.ID),
				"the collector was not given the overlay: `gym eval run --no-serve` reads capture settings from its own --config, not from the running servers",
				"pass the same overlay to `gym eval run --no-serve --config ...` as to `gym env start`")
		case row.Records == 0:
			add("rollouts/no-capture", Error, fmt.Sprintf("no _ng_token_capture, and the capture directory holds no records for %s", row.ID),
				"nothing was recorded: capture disabled on the servers, the agent not opted in, or the harness's base URL lacks /ng-rollout/<id>/training-token-capture",
				"set token_id_capture.enabled with an absolute dir, opt the agent in (responses_api_agents.<agent>.token_id_capture: true) and check the harness's base URL")
		default:
			add("rollouts/no-capture", Error, "no _ng_token_capture: the row was never rebuilt from captured tokens, so it is not trainable", causeNoCapture, fixNoCapture+" (run with --capture-dir to tell these apart)")
		}
		return row, out
	}
	row.HasCapture = true
	checkMetrics(&row, capture, rec, o, add)
	return row, out
}

func checkMetrics(row *RolloutRow, m, rec map[string]any, o RolloutOptions, add func(rule string, sev Severity, msg, cause, fix string)) {
	nCalls, _ := num(m, "n_calls")
	chains, _ := num(m, "chains")
	row.NCalls, row.Chains = int(nCalls), int(chains)
	row.Delivered, _ = num(m, "delivered_fraction")
	if ta, ok := m["terminal_attribution"].(map[string]any); ok {
		row.Chain, _ = ta["chain"].(string)
	}
	if e, ok := m["error"].(string); ok && e != "" {
		cause := "no usable record: a call failed, was refused, or was not captured"
		fix := "look at the proxy/model-server log for the rollout's calls"
		if strings.Contains(e, "no token records") {
			cause = "the calls were never recorded: the harness's URL lacks the training-token-capture segment, or every call failed (e.g. vLLM refused tool_choice \"auto\" or a too-long request)"
			fix = "give the harness the full capture base URL; check vLLM's answers to the calls"
		}
		add("rollouts/capture-error", Error, "the capture could not be rebuilt: "+e, cause, fix)
	}
	if v, ok := m["capture_incomplete"].(bool); ok && v {
		add("rollouts/capture-incomplete", Error, "capture_incomplete: a call failed, was cut, or could not be written", "a model call errored mid-rollout or the capture write failed", "look at the proxy/model-server log for the call")
	}
	switch {
	case row.Chain == "broken" || row.Chain == "not_captured" || row.Chain == "error":
		add("rollouts/terminal-chain", Error, fmt.Sprintf("terminal_attribution.chain is %q", row.Chain),
			"the attributed final call is not on a clean chain (an unproven parent link or a quarantined retry on its path)", "see `capbench explain --capture-dir DIR "+row.ID+"`")
	case row.Chain == "" && row.Chains > 1:
		add("rollouts/unattributed-chains", Error, fmt.Sprintf("%d chains and no attributed final call", row.Chains), chainsCause, "attribute the final call: return the last served response id")
	case row.Chains > 1:
		add("rollouts/chains", Warning, fmt.Sprintf("%d chains; only the attributed one is delivered", row.Chains), chainsCause, "see the chain reasons in `capbench explain`")
	}
	if n, ok := num(m, "unresolved_parent_calls"); ok && n > 0 {
		add("rollouts/unresolved-parents", Warning, fmt.Sprintf("unresolved_parent_calls: %d", int(n)), "retries with identical bodies and nothing naming the kept attempt, or a rewritten history", "supply the final response id")
	}
	if n, ok := num(m, "empty_generation_calls"); ok && n > 0 {
		add("rollouts/empty-generation", Warning, fmt.Sprintf("empty_generation_calls: %d", int(n)), "the output budget ran out before any token", "raise max_tokens or --max-model-len")
	}
	if n, ok := num(m, "quarantined_calls"); ok && n > 0 {
		add("rollouts/quarantined", Info, fmt.Sprintf("quarantined_calls: %d (retry siblings or calls off the chain)", int(n)), "", "usually harmless; check delivered_fraction")
	}
	if row.Masked {
		add("rollouts/masked", Error, "mask_sample: true: the trainer skips this rollout", maskCause(m), "see `capbench explain --capture-dir DIR "+row.ID+"` for the reason")
	}
	if row.NCalls == 1 && o.ExpectTools {
		add("rollouts/one-call", Error, "n_calls is 1 although tools were expected", causeOneCall, fixOneCall)
	}
	if !hasGenerationTokens(rec) && row.NCalls > 0 && !row.Masked {
		add("rollouts/no-generation-tokens", Error, "response.output carries no generation_token_ids with matching generation_log_probs", "the row was not rebuilt from the capture", "finalize with Gym's collector or `capbench verdict --rollouts`")
	}
	row.Healthy = !row.Masked && row.NCalls >= 1 && row.Chains == 1 && (row.Chain == "" || row.Chain == "delivered") && row.Delivered == 1
}

const chainsCause = "compaction, a sub-agent or an auxiliary call (titles), a template that drops earlier reasoning, text before a tool call, or a harness that rewrites history"

func maskCause(m map[string]any) string {
	var parts []string
	if v, _ := m["capture_incomplete"].(bool); v {
		parts = append(parts, "the capture is incomplete")
	}
	if n, _ := num(m, "roots"); n > 1 {
		parts = append(parts, fmt.Sprintf("%d roots (a retried first call, compaction, a sub-agent or a title call)", int(n)))
	}
	if n, _ := num(m, "quarantined_calls"); n > 0 {
		parts = append(parts, "a retried call and nothing names the kept attempt")
	}
	if n, _ := num(m, "unresolved_parent_calls"); n > 0 {
		parts = append(parts, "a call whose parent could not be proven")
	}
	if e, _ := m["error"].(string); e != "" {
		parts = append(parts, e)
	}
	if len(parts) == 0 {
		return "the consumer found no safe trainable chain"
	}
	return strings.Join(parts, "; ")
}

// hasGenerationTokens reports whether some output item carries generation
// token ids with as many log-probs.
func hasGenerationTokens(rec map[string]any) bool {
	resp, _ := rec["response"].(map[string]any)
	items, _ := resp["output"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		ids, ok1 := m["generation_token_ids"].([]any)
		lps, ok2 := m["generation_log_probs"].([]any)
		if ok1 && ok2 && len(ids) > 0 && len(ids) == len(lps) {
			return true
		}
	}
	return false
}

// countRecords counts the committed lines of a rollout's records file in a
// file-store directory, without locking or writing anything. A missing file
// counts 0.
func countRecords(dir, id string) int {
	if strings.ContainsAny(id, `/\`) {
		return 0
	}
	b, err := os.ReadFile(filepath.Join(dir, id+".tokens.jsonl"))
	if err != nil {
		return 0
	}
	n := 0
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(l)) > 0 {
			n++
		}
	}
	return n
}
