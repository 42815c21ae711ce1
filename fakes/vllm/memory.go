package vllm

import (
	"errors"
	"fmt"

	"github.com/capbench/capbench/fakes/gpu"
)

// memoryPlan is the outcome of vLLM's KV-cache sizing at startup.
type memoryPlan struct {
	maxModelLen     int
	kvBlocks        int // 0 = unlimited (memory model off)
	concurrencyLine string
	availableLine   string
}

// profileFor resolves the model profile: the explicit one, else the model's
// own, else the default Qwen3-4B-Thinking-2507 geometry.
func profileFor(o Options) (gpu.Profile, error) {
	if o.Profile != "" {
		p, err := gpu.LookupProfile(o.Profile)
		if err != nil {
			return p, fmt.Errorf("--profile: %w", err)
		}
		return p, nil
	}
	if p, err := gpu.LookupProfile(o.Model); err == nil {
		return p, nil
	}
	return gpu.LookupProfile(DefaultModel)
}

// planMemory runs the startup checks; errors carry vLLM's startup text.
func planMemory(o Options) (memoryPlan, error) {
	prof, err := profileFor(o)
	if err != nil {
		return memoryPlan{}, err
	}
	if o.GPUMemory == 0 {
		p := memoryPlan{maxModelLen: o.MaxModelLen}
		if p.maxModelLen <= 0 {
			p.maxModelLen = prof.MaxPositionEmbeddings
		}
		if p.maxModelLen > prof.MaxPositionEmbeddings {
			//lint:ignore ST1005 vLLM's exact startup text
			return p, fmt.Errorf("User-specified max_model_len (%d) is greater than the derived max_model_len (max_position_embeddings=%d or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error.", p.maxModelLen, prof.MaxPositionEmbeddings)
		}
		return p, nil
	}
	capa, err := gpu.Plan(gpu.Config{
		Profile:              prof,
		GPUMemoryBytes:       o.GPUMemory,
		GPUMemoryUtilization: o.GPUMemoryUtilization,
		MaxModelLen:          o.MaxModelLen,
		MaxNumSeqs:           o.MaxNumSeqs,
		MaxNumBatchedTokens:  o.MaxNumBatchedTokens,
		DType:                o.DType,
		KVCacheDType:         o.KVCacheDType,
	})
	if err != nil {
		var se *gpu.StartupError
		if errors.As(err, &se) {
			return memoryPlan{}, se
		}
		return memoryPlan{}, fmt.Errorf("memory plan: %w", err)
	}
	return memoryPlan{
		maxModelLen:     capa.MaxModelLen,
		kvBlocks:        int(capa.NumBlocks),
		concurrencyLine: capa.ConcurrencyLine(),
		availableLine:   capa.AvailableKVLine(),
	}, nil
}
