// Package gpu models what vLLM does with GPU memory at startup: model
// profiles (geometry, parameter count), weights and activation estimates,
// KV-cache sizing in 16-token blocks, the "does one max-length request fit"
// check with vLLM's exact failure texts, and the concurrency figure vLLM logs.
// It also parses the memory sizes and context lengths vLLM's flags accept.
package gpu

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// GiB is 2^30 bytes, the unit vLLM prints memory in.
const GiB = int64(1) << 30

// Profile is the part of a model's config.json (and of its measured memory
// behaviour) that decides vLLM's memory plan.
type Profile struct {
	Name                  string // Hugging Face repo id, e.g. "Qwen/Qwen3-4B-Thinking-2507"
	NumLayers             int    // num_hidden_layers
	NumAttentionHeads     int
	NumKVHeads            int // num_key_value_heads
	HeadDim               int
	HiddenSize            int
	IntermediateSize      int
	VocabSize             int // embedding rows
	MaxPositionEmbeddings int
	RopeTheta             float64
	TieWordEmbeddings     bool
	ParamCount            int64
	DType                 string // checkpoint dtype (torch_dtype)

	// Memory that is neither weights nor KV cache. vLLM measures these by
	// profiling; the fake estimates them (spec §6.2: about 2–3 GiB for a 4B
	// model at 2048 batched tokens).
	ActivationBaseBytes     int64 // activation peak independent of batch size
	ActivationBytesPerToken int64 // extra activation peak per max_num_batched_tokens
	NonTorchBytes           int64 // CUDA context, allocator slack, NCCL
	CUDAGraphBytes          int64 // CUDA-graph memory estimate
}

// qwen3_4B is the geometry shared by the Qwen3-4B family.
func qwen3_4B(name string, maxPos int, ropeTheta float64) Profile {
	return Profile{
		Name:                    name,
		NumLayers:               36,
		NumAttentionHeads:       32,
		NumKVHeads:              8,
		HeadDim:                 128,
		HiddenSize:              2560,
		IntermediateSize:        9728,
		VocabSize:               151936,
		MaxPositionEmbeddings:   maxPos,
		RopeTheta:               ropeTheta,
		TieWordEmbeddings:       true,
		ParamCount:              4_022_468_096,
		DType:                   "bfloat16",
		ActivationBaseBytes:     GiB / 2,
		ActivationBytesPerToken: 384 << 10,
		NonTorchBytes:           3 * GiB / 4,
		CUDAGraphBytes:          GiB / 2,
	}
}

// knownProfiles returns a fresh table on each call, so callers cannot modify
// shared state.
func knownProfiles() []Profile {
	return []Profile{
		qwen3_4B("Qwen/Qwen3-4B-Thinking-2507", 262144, 5_000_000),
		qwen3_4B("Qwen/Qwen3-4B-Instruct-2507", 262144, 5_000_000),
		qwen3_4B("Qwen/Qwen3-4B", 40960, 1_000_000),
	}
}

// ErrUnknownProfile is returned (wrapped) by LookupProfile.
var ErrUnknownProfile = errors.New("unknown model profile")

// LookupProfile finds a profile by repo id ("Qwen/Qwen3-4B-Thinking-2507") or
// by its last path element ("Qwen3-4B-Thinking-2507"); case is ignored.
func LookupProfile(name string) (Profile, error) {
	want := strings.ToLower(strings.TrimSpace(name))
	for _, p := range knownProfiles() {
		full := strings.ToLower(p.Name)
		short := full[strings.LastIndex(full, "/")+1:]
		if want == full || want == short {
			return p, nil
		}
	}
	return Profile{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownProfile, name, strings.Join(ProfileNames(), ", "))
}

// ProfileNames lists the repo ids of the known profiles, sorted.
func ProfileNames() []string {
	var names []string
	for _, p := range knownProfiles() {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	return names
}

// KVBytesPerToken is the KV-cache size of one token over all layers:
// 2 (K and V) × layers × kv_heads × head_dim × bytes per element.
func (p Profile) KVBytesPerToken(kvDTypeBytes int) int64 {
	return 2 * int64(p.NumLayers) * int64(p.NumKVHeads) * int64(p.HeadDim) * int64(kvDTypeBytes)
}

// WeightBytes is the memory the weights take in a dtype of the given width.
func (p Profile) WeightBytes(dtypeBytes int) int64 {
	return p.ParamCount * int64(dtypeBytes)
}
