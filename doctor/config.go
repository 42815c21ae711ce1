package doctor

import (
	"fmt"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/capbench/capbench/doctor/page"
	"github.com/capbench/capbench/fakes/gpu"
)

// ConfigCheck is what `doctor config` checks.
type ConfigCheck struct {
	// Path is the overlay file; empty checks only the serve flags.
	Path string
	// VLLMArgs is a `vllm serve` command line (with or without "vllm serve").
	VLLMArgs string
	// GPU is a memory size or GPU name; empty skips the memory checks.
	GPU string
	// Model is assumed when VLLMArgs names none.
	Model string
}

// CheckConfig checks an overlay as a plain overlay for `gym` commands and,
// with VLLMArgs, the serve flags on the GPU.
func CheckConfig(c ConfigCheck) (*Report, error) {
	rep := NewReport("config", c.Path)
	if c.Path == "" && c.VLLMArgs == "" {
		return nil, fmt.Errorf("nothing to check: give an overlay file or --vllm-args")
	}
	if c.Path != "" {
		src, err := os.ReadFile(c.Path)
		if err != nil {
			return nil, fmt.Errorf("overlay: %w", err)
		}
		_, fs := CheckOverlay(src, ConfigOptions{File: c.Path, ForGymCommand: true})
		rep.Add(fs...)
		if c.GPU != "" {
			fs, err := checkNemoRLMemory(src, c)
			if err != nil {
				return nil, err
			}
			rep.Add(fs...)
		}
	}
	if c.VLLMArgs != "" {
		s, err := serveFromArgs(c.VLLMArgs, c.Model)
		if err != nil {
			return nil, fmt.Errorf("--vllm-args: %w", err)
		}
		o := ServeOptions{File: "--vllm-args"}
		if c.GPU != "" {
			if o.GPUBytes, o.GPULabel, err = gpu.ParseDevice(c.GPU); err != nil {
				return nil, fmt.Errorf("--gpu: %w", err)
			}
		}
		fs := CheckServe(s, o)
		for i := range fs {
			fs[i].Line = 0 // one command line: the flag names it
		}
		rep.Add(fs...)
	}
	rep.Sort()
	return rep, nil
}

// checkNemoRLMemory runs the serve memory checks on a NeMo RL vllm_cfg.
func checkNemoRLMemory(src []byte, c ConfigCheck) ([]Finding, error) {
	s, ok, unresolved := nemoRLServe(src, 0)
	if !ok {
		return nil, nil
	}
	if s.Model == "" {
		s.Model = c.Model
	}
	o := ServeOptions{File: c.Path}
	var err error
	if o.GPUBytes, o.GPULabel, err = gpu.ParseDevice(c.GPU); err != nil {
		return nil, fmt.Errorf("--gpu: %w", err)
	}
	var out []Finding
	if unresolved != "" {
		out = append(out, Finding{Rule: "config/nemo-rl-unresolved", Severity: Info, File: c.Path, Line: s.Line,
			Message: fmt.Sprintf("vllm_cfg uses %s, known only at run time; that setting was not checked", unresolved)})
	}
	for _, f := range CheckServe(s, o) {
		if strings.HasPrefix(f.Rule, "serve/refuses") || strings.HasPrefix(f.Rule, "serve/context") || f.Rule == "serve/bad-value" || f.Rule == "serve/no-profile" {
			f.Subject = strings.Replace(strings.Replace(f.Subject, "--max-model-len", "vllm_cfg.max_model_len", 1), "--model", "model_name", 1)
			out = append(out, f)
		}
	}
	return out, nil
}

func serveFromArgs(args, model string) (Serve, error) {
	b := page.Block{Lang: "bash", Text: args + "\n", Line: 1}
	cmds := b.Commands()
	if len(cmds) != 1 {
		return Serve{}, fmt.Errorf("want one command line, got %d", len(cmds))
	}
	argv := cmds[0].Args
	if !cmds[0].Is("vllm", "serve") {
		argv = append([]string{"vllm", "serve"}, argv...)
	}
	s, err := ParseServe(argv, nil)
	if err != nil {
		return s, err
	}
	if s.Model == "" || strings.HasPrefix(s.Model, "-") {
		s.Model = model
	}
	return s, nil
}

// nemoRLServe reads the vLLM settings of a NeMo RL config (a `vllm_cfg`
// mapping; the model from `model_name`), resolving plain ${a.b} references.
// ok is false when the file has no vllm_cfg.
func nemoRLServe(src []byte, lineOffset int) (s Serve, ok bool, unresolved string) {
	var doc yaml.Node
	if yaml.Unmarshal(src, &doc) != nil || len(doc.Content) == 0 {
		return s, false, ""
	}
	root := doc.Content[0]
	var cfg, model *yaml.Node
	var walk func(n *yaml.Node)
	walk = func(n *yaml.Node) {
		if n == nil || n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			switch {
			case k.Value == "vllm_cfg" && cfg == nil && v.Kind == yaml.MappingNode:
				cfg = v
			case k.Value == "model_name" && model == nil && v.Kind == yaml.ScalarNode:
				model = v
			}
			walk(v)
		}
	}
	walk(root)
	if cfg == nil {
		return s, false, ""
	}
	s = Serve{Lines: map[string]int{}, Line: cfg.Line + lineOffset, EnableAutoToolChoice: true, ToolCallParser: "-"}
	val := func(n *yaml.Node) (string, bool) {
		for range 8 { // follow ${a.b} references a few steps
			if n == nil {
				return "", true
			}
			m := plainRef.FindStringSubmatch(n.Value)
			if m == nil {
				if isInterp(n) {
					unresolved = n.Value
					return "", false
				}
				return n.Value, true
			}
			n = lookupPath(root, m[1])
		}
		return "", false
	}
	if model != nil {
		if v, ok := val(model); ok {
			s.Model, s.Lines["model"] = v, model.Line+lineOffset
		}
	}
	for key, flag := range map[string]string{"max_model_len": "max-model-len", "gpu_memory_utilization": "gpu-memory-utilization", "kv_cache_dtype": "kv-cache-dtype"} {
		_, n := mapGet(cfg, key)
		if n == nil {
			continue
		}
		v, ok := val(n)
		if !ok {
			continue
		}
		s.Lines[flag] = n.Line + lineOffset
		switch flag {
		case "max-model-len":
			s.MaxModelLen = v
		case "gpu-memory-utilization":
			s.GPUMemoryUtilization = v
		case "kv-cache-dtype":
			s.KVCacheDType = v
		}
	}
	return s, true, unresolved
}

var plainRef = regexp.MustCompile(`^\$\{([A-Za-z_][\w.]*)\}$`)

func lookupPath(root *yaml.Node, path string) *yaml.Node {
	n := root
	for _, k := range strings.Split(path, ".") {
		if _, n = mapGet(n, k); n == nil {
			return nil
		}
	}
	return n
}
