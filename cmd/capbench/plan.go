package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/fakes/vllm"
	"github.com/capbench/capbench/reports"
)

// errVLLMRefuses is returned (after the report, which shows vLLM's message)
// when vLLM would not start.
var errVLLMRefuses = errors.New("vLLM would refuse to start")

// newPlanCmd is `capbench plan`: the fake's GPU memory model as a planner.
func newPlanCmd() *cobra.Command {
	var (
		device, model, maxModelLen, logPath string
		c                                   gpu.Config
		maxTokens, promptTokens             int
		asJSON                              bool
	)
	cmd := &cobra.Command{
		Use:   "plan --gpu 48GiB|NAME [--model MODEL] [--max-model-len N] [--max-tokens 32000]",
		Short: "Predict whether vLLM starts, its KV-cache size and how many concurrent agent calls fit",
		Long: `Runs vLLM's startup memory plan (the same code the fake vLLM runs): whether
vLLM starts, its "GPU KV cache size ... Maximum concurrency" line, how many
concurrent calls of --prompt-tokens + --max-tokens fit the KV cache
(num_blocks / ceil(len / block_size)) and the largest --max-model-len that
starts. Exits non-zero, printing vLLM's message, when vLLM would refuse to start.
--vllm-log FILE compares the profile with a real vLLM startup log.
GPUs: ` + fmt.Sprint(gpu.DeviceNames()) + `, or a size such as 48GiB.
Models: ` + fmt.Sprint(gpu.ProfileNames()) + `.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if device == "" {
				return errors.New("--gpu is required (a size such as 48GiB, or a name such as L40S)")
			}
			total, label, err := gpu.ParseDevice(device)
			if err != nil {
				return fmt.Errorf("--gpu: %w", err)
			}
			if c.Profile, err = gpu.LookupProfile(model); err != nil {
				return fmt.Errorf("--model: %w", err)
			}
			if maxTokens < 0 || promptTokens < 0 {
				return errors.New("--max-tokens and --prompt-tokens must not be negative")
			}
			c.GPUMemoryBytes = total
			if maxModelLen != "" {
				if c.MaxModelLen, err = gpu.ParseMaxModelLen(maxModelLen); err != nil {
					return err
				}
			}
			p := reports.Plan{Model: c.Profile.Name, GPU: label, LogFile: logPath}
			if logPath != "" {
				if p.Log, err = readVLLMLog(logPath, c.BlockSize); err != nil {
					return err
				}
				if maxModelLen == "" && p.Log.MaxModelLen > 0 {
					c.MaxModelLen = p.Log.MaxModelLen // compare like with like
				}
			}
			p.Config = c
			if p.Forecast, err = gpu.Predict(c, promptTokens+maxTokens); err != nil {
				return err
			}
			if p.Log != nil && p.Forecast.Capacity != nil {
				p.Deltas = gpu.CompareLog(p.Forecast.Capacity, p.Log)
			}
			if asJSON {
				err = reports.PlanJSON(cmd.OutOrStdout(), p)
			} else {
				err = reports.PlanText(cmd.OutOrStdout(), p)
			}
			if err != nil {
				return err
			}
			if r := p.Forecast.Refusal; r != nil {
				// The report shows vLLM's message; exit 1 without repeating it.
				return reportedError{exitError{code: 1, err: fmt.Errorf("%w: %s: %s", errVLLMRefuses, r.Exception, r.Message)}}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&device, "gpu", "", "GPU memory (48GiB, 44.52GiB) or a GPU name (L40S, RTX 6000 Ada, A100 40GB, A100 80GB, H100, H200)")
	f.StringVar(&model, "model", vllm.DefaultModel, "model profile (Hugging Face repo id or its last part)")
	f.StringVar(&maxModelLen, "max-model-len", "", "vLLM's --max-model-len (default: the model's max_position_embeddings; -1/auto: the largest that fits)")
	f.IntVar(&maxTokens, "max-tokens", 32000, "output budget of one agent call (Claude Code asks for 32000)")
	f.IntVar(&promptTokens, "prompt-tokens", 0, "prompt length of one agent call, added to --max-tokens")
	f.Float64Var(&c.GPUMemoryUtilization, "gpu-memory-utilization", gpu.DefaultGPUMemoryUtilization, "vLLM's --gpu-memory-utilization")
	f.StringVar(&c.KVCacheDType, "kv-cache-dtype", "auto", "vLLM's --kv-cache-dtype (auto, bfloat16, fp8, ...)")
	f.StringVar(&c.DType, "dtype", "auto", "vLLM's --dtype")
	f.IntVar(&c.MaxNumSeqs, "max-num-seqs", 0, "vLLM's --max-num-seqs (default by GPU size)")
	f.IntVar(&c.MaxNumBatchedTokens, "max-num-batched-tokens", 0, "vLLM's --max-num-batched-tokens (default by GPU size)")
	f.IntVar(&c.BlockSize, "block-size", gpu.DefaultBlockSize, "vLLM's --block-size")
	f.StringVar(&logPath, "vllm-log", "", "a real vLLM startup log to compare the profile with")
	f.BoolVar(&asJSON, "json", false, "print the plan as JSON")
	return cmd
}

func readVLLMLog(path string, blockSize int) (*gpu.LogFacts, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--vllm-log: %w", err)
	}
	defer fh.Close()
	facts, err := gpu.ParseVLLMLog(fh, blockSize)
	if err != nil {
		return nil, fmt.Errorf("--vllm-log %s: %w", path, err)
	}
	return facts, nil
}
