package doctor

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// captureKeys are the token_id_capture keys Gym's startup validation knows
// (docs/doctor.md lists them with their types).
var captureKeys = map[string]string{
	"enabled": "bool", "all_agents": "bool", "dir": "path", "sink": "string", "sink_kwargs": "map",
	"lineage_store": "string", "lineage_store_kwargs": "map", "allow_unresolved_continuations": "bool",
	"rebuild_response": "bool", "delta_records": "bool", "max_mask_fraction": "fraction",
	"mask_fraction_min_samples": "int", "mask_incomplete_when_attributed": "bool",
	"external_staging": "any", "external_staging_backend": "any", "control_auth_token_env": "string",
}

// interpolation matches an OmegaConf interpolation such as ${oc.env:VAR}
// or ${oc.env:VAR,/tmp/x}; its value is only known when Gym starts.
var interpolation = regexp.MustCompile(`\$\{[^}]*\}`)

// ConfigOptions place an overlay's findings.
type ConfigOptions struct {
	// File names the overlay in findings.
	File string
	// LineOffset is added to YAML line numbers (a block inside a page).
	LineOffset int
	// ForGymCommand says the file is given to `gym env start` / `gym eval
	// run --config` (so the NeMo RL nesting is a mistake there).
	ForGymCommand bool
}

// Overlay is what an overlay file turned out to hold.
type Overlay struct {
	// Capture is true when a top-level token_id_capture has enabled: true
	// (or an interpolation that may resolve to true).
	Capture bool
	// Nested is true when the keys sit under env.nemo_gym (NeMo RL).
	Nested bool
	// Dir is token_id_capture.dir (or model_call_capture_dir) as written.
	Dir string
	// OptedIn is true when all_agents or some agent's own flag is on.
	OptedIn bool
}

type yamlCheck struct {
	o   ConfigOptions
	out []Finding
}

func (c *yamlCheck) add(n *yaml.Node, rule string, sev Severity, subject, msg, cause, fix string) {
	line := 0
	if n != nil {
		line = n.Line + c.o.LineOffset
	}
	c.out = append(c.out, Finding{Rule: rule, Severity: sev, File: c.o.File, Line: line, Subject: subject, Message: msg, Cause: cause, Fix: fix})
}

// mapGet returns the key and value nodes of key in a mapping node.
func mapGet(m *yaml.Node, key string) (*yaml.Node, *yaml.Node) {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i], m.Content[i+1]
		}
	}
	return nil, nil
}

// CheckOverlay checks a capture overlay the way Gym's startup validation
// would, plus the NeMo RL nesting and vLLM keys.
func CheckOverlay(src []byte, o ConfigOptions) (Overlay, []Finding) {
	c := &yamlCheck{o: o}
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		c.add(nil, "config/yaml", Error, "", "not valid YAML: "+err.Error(), "", "fix the YAML syntax")
		return Overlay{}, c.out
	}
	if len(doc.Content) == 0 {
		c.add(nil, "config/empty", Error, "", "the overlay is empty", "", "write the token_id_capture block")
		return Overlay{}, c.out
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		c.add(root, "config/not-mapping", Error, "", "the overlay's top level is not a mapping", "", "write top-level Gym keys such as token_id_capture:")
		return Overlay{}, c.out
	}
	var ov Overlay
	_, envNode := mapGet(root, "env")
	_, gymNode := mapGet(envNode, "nemo_gym")
	nestedKey, nested := mapGet(gymNode, "token_id_capture")
	_, top := mapGet(root, "token_id_capture")
	_, fallbackDir := mapGet(root, "model_call_capture_dir")
	if nested != nil {
		ov.Nested = true
		if o.ForGymCommand && top == nil {
			c.add(nestedKey, "config/nemo-rl-nesting", Error, "env.nemo_gym.token_id_capture",
				"the token_id_capture block is nested under env.nemo_gym (NeMo RL's layout); `gym` commands ignore it, so capture stays off and nothing errors",
				"a NeMo RL config pasted as a Gym overlay", "for `gym env start` / `gym eval run --config`, put token_id_capture and responses_api_agents at the top level")
		}
		_, fd := mapGet(gymNode, "model_call_capture_dir")
		c.captureBlock(nested, "env.nemo_gym.token_id_capture", gymNode, fd)
	}
	if top != nil {
		ov.Capture, ov.Dir, ov.OptedIn = c.captureBlock(top, "token_id_capture", root, fallbackDir)
	} else if nested == nil {
		c.add(root, "config/no-capture-block", Warning, "token_id_capture", "no token_id_capture block: capture stays off with this overlay", "", "add token_id_capture: {enabled: true, dir: /abs/path}")
	}
	c.vllmKeys(root, "")
	return ov, c.out
}

// captureBlock validates one token_id_capture mapping; scope is the mapping
// that holds it (where responses_api_agents lives).
func (c *yamlCheck) captureBlock(b *yaml.Node, at string, scope, fallbackDir *yaml.Node) (enabled bool, dir string, optedIn bool) {
	if b.Kind != yaml.MappingNode {
		c.add(b, "config/capture-not-mapping", Error, at, at+" is not a mapping", "", "write enabled:, dir: ... under it")
		return false, "", false
	}
	known := slices.Sorted(func(yield func(string) bool) {
		for k := range captureKeys {
			if !yield(k) {
				return
			}
		}
	})
	for i := 0; i+1 < len(b.Content); i += 2 {
		k, v := b.Content[i], b.Content[i+1]
		typ, ok := captureKeys[k.Value]
		if !ok {
			c.add(k, "config/unknown-key", Error, at+"."+k.Value, fmt.Sprintf("unknown key %q: Gym refuses to start", k.Value),
				"a typo or a key of another version", "use one of: "+strings.Join(known, ", "))
			continue
		}
		c.typeCheck(k, v, at+"."+k.Value, typ)
	}
	_, en := mapGet(b, "enabled")
	switch {
	case en == nil:
		c.add(b, "config/not-enabled", Warning, at+".enabled", "enabled is not set, so capture is off (the default is false)", "", "set "+at+".enabled: true")
		return false, "", false
	case isInterp(en):
		enabled = true
	case en.Tag == "!!bool" && en.Value == "true":
		enabled = true
	default:
		c.add(en, "config/not-enabled", Warning, at+".enabled", "enabled is false: capture is off and the other settings are not checked by Gym", "", "set "+at+".enabled: true to capture")
		return false, "", false
	}
	_, d := mapGet(b, "dir")
	_, sink := mapGet(b, "sink")
	_, rebuild := mapGet(b, "rebuild_response")
	hasSink := sink != nil && sink.Tag != "!!null" && sink.Value != ""
	dirNode := d
	if dirNode == nil || dirNode.Tag == "!!null" {
		dirNode = fallbackDir
	}
	hasDir := dirNode != nil && dirNode.Tag != "!!null" && dirNode.Value != ""
	switch {
	case hasSink && hasDir && d != nil:
		c.add(d, "config/sink-and-dir", Warning, at+".dir", "dir is set next to sink: the sink replaces the file store and dir is ignored (Gym warns)", "", "remove dir, or remove sink to use the file store")
	case hasSink:
		_, ls := mapGet(b, "lineage_store")
		_, allow := mapGet(b, "allow_unresolved_continuations")
		if ls == nil && !(allow != nil && allow.Value == "true") {
			c.add(sink, "config/sink-without-resolver", Warning, at+".lineage_store",
				"a custom sink without lineage_store: newer Gym refuses to start, older ones leave every continuation unresolved (masked)", "", "set lineage_store, or allow_unresolved_continuations: true")
		}
	case !hasDir && !(rebuild != nil && rebuild.Value == "false"):
		c.add(b, "config/no-dir", Error, at+".dir", "enabled without a directory or sink: Gym refuses to start",
			"neither dir nor model_call_capture_dir nor sink is set", "set "+at+".dir to an absolute, node-local path such as /tmp/nemo_gym_token_id_captures")
	}
	if hasDir {
		dir = dirNode.Value
		if !isInterp(dirNode) && !path.IsAbs(dir) {
			c.add(dirNode, "config/relative-dir", Error, at+".dir", fmt.Sprintf("dir %q is relative: Gym refuses to start", dir), "", "use an absolute, node-local path")
		}
	}
	_, all := mapGet(b, "all_agents")
	optedIn = all != nil && (all.Value == "true" || isInterp(all)) || c.agentOptedIn(scope)
	if !optedIn {
		c.add(b, "config/no-agent-opt-in", Error, "responses_api_agents", "capture is enabled but no agent is opted in, so nothing is captured",
			"participation is enabled AND (all_agents OR the agent's own token_id_capture flag)",
			"add responses_api_agents.<agent>.token_id_capture: true (e.g. claude_code_agent) or token_id_capture.all_agents: true")
	}
	return true, dir, optedIn
}

func isInterp(n *yaml.Node) bool {
	return n != nil && n.Kind == yaml.ScalarNode && interpolation.MatchString(n.Value)
}

func (c *yamlCheck) typeCheck(k, v *yaml.Node, at, typ string) {
	if isInterp(v) || v.Tag == "!!null" && typ != "bool" && typ != "map" {
		return
	}
	bad := func(want string) {
		c.add(v, "config/bad-type", Error, at, fmt.Sprintf("%s is %q, want %s", k.Value, v.Value, want), "", "write "+want)
	}
	switch typ {
	case "bool":
		if v.Tag != "!!bool" {
			bad("true or false")
		}
	case "path", "string":
		if v.Kind != yaml.ScalarNode || v.Tag != "!!str" {
			bad("a string")
		}
	case "map":
		if v.Kind != yaml.MappingNode {
			bad("a mapping")
		}
	case "int":
		if v.Tag != "!!int" {
			bad("an integer")
		}
	case "fraction":
		f, err := strconv.ParseFloat(v.Value, 64)
		if (v.Tag != "!!float" && v.Tag != "!!int") || err != nil || f < 0 || f > 1 {
			bad("a fraction in [0, 1] or null")
		}
	}
}

// agentOptedIn looks for responses_api_agents.<impl>.token_id_capture: true
// at any depth below scope.
func (c *yamlCheck) agentOptedIn(scope *yaml.Node) bool {
	found := false
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || found || n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if k.Value == "responses_api_agents" && v.Kind == yaml.MappingNode {
				for j := 1; j < len(v.Content); j += 2 {
					_, flag := mapGet(v.Content[j], "token_id_capture")
					if flag == nil {
						continue
					}
					if flag.Tag == "!!bool" && flag.Value == "true" || isInterp(flag) {
						found = true
					} else if flag.Tag != "!!bool" {
						c.add(flag, "config/bad-type", Error, "responses_api_agents."+v.Content[j-1].Value+".token_id_capture",
							fmt.Sprintf("the agent's token_id_capture is %q, want true or false", flag.Value), "", "write true")
					}
				}
			}
			if k.Value != "env" || n != scope { // the nesting is checked on its own
				walk(v)
			}
		}
	}
	walk(scope)
	return found
}

// vllmKeys checks NeMo RL's vLLM keys wherever they appear: both tool keys
// under http_server_serving_chat_kwargs, and the tokenizer kept on.
func (c *yamlCheck) vllmKeys(n *yaml.Node, at string) {
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		p := strings.TrimPrefix(at+"."+k.Value, ".")
		switch k.Value {
		case "http_server_serving_chat_kwargs":
			_, parser := mapGet(v, "tool_parser")
			_, auto := mapGet(v, "enable_auto_tools")
			autoOn := auto != nil && (auto.Value == "true" || isInterp(auto))
			switch {
			case parser != nil && !autoOn:
				c.add(parser, "config/nemo-rl-tool-parser-alone", Error, p+".tool_parser",
					"tool_parser is set without enable_auto_tools: true, so automatic tool choice stays off",
					"Claude Code's tool requests then fail (\"auto\" tool choice requires ...) or the tool call stays text: every rollout is one call",
					"set "+p+".enable_auto_tools: true next to tool_parser")
			case autoOn && parser == nil:
				c.add(auto, "config/nemo-rl-auto-tools-alone", Error, p+".enable_auto_tools", "enable_auto_tools without tool_parser: vLLM refuses to start", "", "set "+p+".tool_parser: hermes")
			}
		case "skip_tokenizer_init":
			if v.Value == "true" {
				c.add(v, "config/skip-tokenizer-init", Error, p, "skip_tokenizer_init: true turns the tokenizer off, so no token ids come back", "", "set "+p+": false")
			}
		}
		c.vllmKeys(v, p)
	}
}
