package doctor

import (
	"fmt"
	"os"
	"strings"

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
	} else if c.GPU != "" {
		rep.Add(Finding{Rule: "config/gpu-without-args", Severity: Info, Message: "--gpu is only used with --vllm-args"})
	}
	rep.Sort()
	return rep, nil
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
