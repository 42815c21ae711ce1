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
	Architecture          string // "qwen3" or "llama"
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
	// profiling; the fake estimates them (about 2–3 GiB for a 4B model at 2048
	// batched tokens; docs/plan.md#model-profiles).
	ActivationBaseBytes     int64 // activation peak independent of batch size
	ActivationBytesPerToken int64 // extra activation peak per max_num_batched_tokens
	NonTorchBytes           int64 // CUDA context, allocator slack, NCCL
	CUDAGraphBytes          int64 // CUDA-graph memory estimate
}

// Architecture families whose parameter count follows from the geometry.
const (
	archQwen3 = "qwen3" // q/k norms per layer, no attention bias
	archLlama = "llama" // no q/k norms
)

// geometryParams counts a dense decoder's parameters from its config.json
// numbers: attention (q, k, v, o), a gated MLP (gate, up, down), the layer
// norms, embeddings (and an untied lm_head) and the final norm.
func geometryParams(arch string, layers, heads, kvHeads, headDim, hidden, inter, vocab int, tied bool) int64 {
	h, hd := int64(hidden), int64(headDim)
	perLayer := h*int64(heads)*hd + 2*h*int64(kvHeads)*hd + int64(heads)*hd*h + 3*h*int64(inter) + 2*h
	if arch == archQwen3 {
		perLayer += 2 * hd // q_norm and k_norm
	}
	emb := int64(vocab) * h
	if !tied {
		emb *= 2
	}
	return emb + int64(layers)*perLayer + h
}

// dense builds a profile from config.json numbers. The non-KV overheads are
// the Qwen3-4B estimates for every model (docs/plan.md): they are measured,
// not derived, in vLLM, and `capbench plan --vllm-log` shows how far off
// they are for a given card.
func dense(name, arch string, layers, heads, kvHeads, headDim, hidden, inter, vocab, maxPos int, ropeTheta float64, tied bool) Profile {
	return Profile{
		Name:                    name,
		Architecture:            arch,
		NumLayers:               layers,
		NumAttentionHeads:       heads,
		NumKVHeads:              kvHeads,
		HeadDim:                 headDim,
		HiddenSize:              hidden,
		IntermediateSize:        inter,
		VocabSize:               vocab,
		MaxPositionEmbeddings:   maxPos,
		RopeTheta:               ropeTheta,
		TieWordEmbeddings:       tied,
		ParamCount:              geometryParams(arch, layers, heads, kvHeads, headDim, hidden, inter, vocab, tied),
		DType:                   "bfloat16",
		ActivationBaseBytes:     GiB / 2,
		ActivationBytesPerToken: 384 << 10,
		NonTorchBytes:           3 * GiB / 4,
		CUDAGraphBytes:          GiB / 2,
	}
}

// qwen3_4B is the geometry shared by the Qwen3-4B family.
func qwen3_4B(name string, maxPos int, ropeTheta float64) Profile {
	return dense(name, archQwen3, 36, 32, 8, 128, 2560, 9728, 151936, maxPos, ropeTheta, true)
}

// knownProfiles returns a fresh table on each call, so callers cannot modify
// shared state. Numbers are those of each model's config.json.
func knownProfiles() []Profile {
	return []Profile{
		qwen3_4B("Qwen/Qwen3-4B-Thinking-2507", 262144, 5_000_000),
		qwen3_4B("Qwen/Qwen3-4B-Instruct-2507", 262144, 5_000_000),
		qwen3_4B("Qwen/Qwen3-4B", 40960, 1_000_000),
		dense("Qwen/Qwen3-8B", archQwen3, 36, 32, 8, 128, 4096, 12288, 151936, 40960, 1_000_000, false),
		dense("Qwen/Qwen3-32B", archQwen3, 64, 64, 8, 128, 5120, 25600, 151936, 40960, 1_000_000, false),
		dense("meta-llama/Llama-3.1-8B", archLlama, 32, 32, 8, 128, 4096, 14336, 128256, 131072, 500_000, false),
		dense("meta-llama/Llama-3.1-8B-Instruct", archLlama, 32, 32, 8, 128, 4096, 14336, 128256, 131072, 500_000, false),
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
