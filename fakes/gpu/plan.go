package gpu

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/capbench/capbench/internal/pyfmt"
)

// Defaults vLLM applies when a flag is not given.
const (
	DefaultGPUMemoryUtilization = 0.92
	DefaultBlockSize            = 16
)

// Config is the part of vLLM's engine configuration that decides the memory
// plan. Zero values mean "flag not given" and take vLLM's defaults, except
// GPUMemoryBytes, which is required.
type Config struct {
	Profile Profile
	// GPUMemoryBytes is the device's total memory as cudaMemGetInfo reports
	// it (e.g. 44.52 GiB for a "48 GB" L40S).
	GPUMemoryBytes int64
	// FreeMemoryBytes is the free memory at startup; 0 means all of it.
	FreeMemoryBytes      int64
	GPUMemoryUtilization float64 // 0 → 0.92
	// MaxModelLen: 0 → the profile's max_position_embeddings; -1 → the
	// largest length that fits the KV cache (vLLM's "auto").
	MaxModelLen         int
	MaxNumSeqs          int    // 0 → 256 below 70 GiB, else 1024
	MaxNumBatchedTokens int    // 0 → 2048 below 70 GiB, 8192 below 160 GiB, else 16384
	DType               string // "", "auto" → the profile's dtype
	KVCacheDType        string // "", "auto" → the model dtype
	BlockSize           int    // 0 → 16
	// AllowLongMaxModelLen mirrors VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.
	AllowLongMaxModelLen bool
}

// Capacity is the outcome of a successful startup plan.
type Capacity struct {
	Model                string
	MaxModelLen          int
	MaxNumSeqs           int
	MaxNumBatchedTokens  int
	BlockSize            int
	GPUMemoryUtilization float64
	DType                string
	KVCacheDType         string

	TotalBytes       int64 // device total
	RequestedBytes   int64 // ceil(total × utilization)
	WeightBytes      int64
	ActivationBytes  int64
	NonTorchBytes    int64
	CUDAGraphBytes   int64
	NonKVBytes       int64 // weights + activation + non-torch + CUDA graphs
	AvailableKVBytes int64 // requested − non-KV

	KVBytesPerToken int64 // over all layers
	BlockBytes      int64 // one block over all layers
	NumBlocks       int64 // GPU KV-cache blocks
	KVCacheTokens   int64 // as vLLM logs it
	MaxConcurrency  float64
}

// Startup failure reasons, matched with errors.Is against a *StartupError.
var (
	ErrInvalidArgument     = errors.New("invalid engine argument")
	ErrMaxModelLenTooLarge = errors.New("max_model_len above the model's maximum")
	ErrInsufficientFree    = errors.New("not enough free GPU memory")
	ErrNoKVCacheMemory     = errors.New("no memory left for the KV cache")
	ErrKVCacheTooSmall     = errors.New("KV cache cannot hold one max-length request")
)

// StartupError is a startup failure carrying vLLM's own message text.
type StartupError struct {
	Reason    error  // one of the Err* sentinels above
	Exception string // the Python exception vLLM raises, e.g. "ValueError"
	Message   string // vLLM's text, verbatim
}

func (e *StartupError) Error() string { return e.Message }

// Is matches the failure's reason sentinel.
func (e *StartupError) Is(target error) bool { return target == e.Reason }

func startupErr(reason error, exc, format string, args ...any) *StartupError {
	return &StartupError{Reason: reason, Exception: exc, Message: fmt.Sprintf(format, args...)}
}

// DefaultSchedulerLimits returns vLLM's API-server defaults for max_num_seqs
// and max_num_batched_tokens on a device of the given total memory. vLLM
// keys these on the device class; the fake keys them on memory size.
func DefaultSchedulerLimits(totalBytes int64) (maxNumSeqs, maxNumBatchedTokens int) {
	switch {
	case totalBytes < 70*GiB:
		return 256, 2048
	case totalBytes < 160*GiB:
		return 1024, 8192
	default:
		return 1024, 16384
	}
}

var validBlockSizes = []int{1, 8, 16, 32, 64, 128}

// DTypeBytes returns the element width of a --dtype value; model is the
// checkpoint dtype that "auto" resolves to.
func DTypeBytes(dtype, model string) (int, error) {
	d := strings.ToLower(dtype)
	if d == "" || d == "auto" {
		d = strings.ToLower(model)
	}
	switch d {
	case "bfloat16", "bf16", "half", "float16", "fp16":
		return 2, nil
	case "float", "float32", "fp32":
		return 4, nil
	}
	return 0, startupErr(ErrInvalidArgument, "ArgumentError",
		"argument --dtype: invalid choice: '%s' (choose from auto, bfloat16, float, float16, float32, half)", dtype)
}

var kvDTypes = []string{"auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}

// KVDTypeBytes returns the element width of a --kv-cache-dtype value;
// modelBytes is what "auto" resolves to.
func KVDTypeBytes(kvDType string, modelBytes int) (int, error) {
	d := strings.ToLower(kvDType)
	switch {
	case d == "" || d == "auto":
		return modelBytes, nil
	case d == "bfloat16" || d == "float16":
		return 2, nil
	case strings.HasPrefix(d, "fp8") && slices.Contains(kvDTypes, d):
		return 1, nil
	}
	return 0, startupErr(ErrInvalidArgument, "ArgumentError",
		"argument --kv-cache-dtype: invalid choice: '%s' (choose from %s)", kvDType, strings.Join(kvDTypes, ", "))
}

// Plan runs vLLM's startup memory checks and sizes the KV cache. Failures are
// *StartupError values whose Message is vLLM's text.
func Plan(c Config) (*Capacity, error) {
	p := c.Profile
	if p.NumLayers <= 0 || p.NumKVHeads <= 0 || p.HeadDim <= 0 || p.ParamCount <= 0 || p.MaxPositionEmbeddings <= 0 {
		return nil, startupErr(ErrInvalidArgument, "ValueError", "model profile %q is incomplete (layers, kv heads, head dim, parameters and max_position_embeddings must be positive)", p.Name)
	}
	if c.GPUMemoryBytes <= 0 {
		return nil, startupErr(ErrInvalidArgument, "ValueError", "GPU memory must be positive, got %d bytes", c.GPUMemoryBytes)
	}
	// Checks run in vLLM's order: model config (dtype, max_model_len),
	// cache config (utilization, block size, KV dtype), scheduler config.
	dtypeBytes, err := DTypeBytes(c.DType, p.DType)
	if err != nil {
		return nil, err
	}
	maxLen := c.MaxModelLen
	auto := maxLen == -1
	if maxLen == 0 {
		maxLen = p.MaxPositionEmbeddings
	}
	if !auto {
		if err := CheckMaxModelLen(p, maxLen, c.AllowLongMaxModelLen); err != nil {
			return nil, err
		}
	}
	util := c.GPUMemoryUtilization
	if util == 0 {
		util = DefaultGPUMemoryUtilization
	}
	if err := CheckGPUMemoryUtilization(util); err != nil {
		return nil, err
	}
	block := c.BlockSize
	if block == 0 {
		block = DefaultBlockSize
	}
	if !slices.Contains(validBlockSizes, block) {
		return nil, startupErr(ErrInvalidArgument, "ArgumentError",
			"argument --block-size: invalid choice: %d (choose from 1, 8, 16, 32, 64, 128)", block)
	}
	kvBytes, err := KVDTypeBytes(c.KVCacheDType, dtypeBytes)
	if err != nil {
		return nil, err
	}

	seqs, batched := DefaultSchedulerLimits(c.GPUMemoryBytes)
	if c.MaxNumSeqs != 0 {
		seqs = c.MaxNumSeqs
	}
	if c.MaxNumBatchedTokens != 0 {
		batched = c.MaxNumBatchedTokens
	}
	if seqs < 1 {
		return nil, pydanticErr("SchedulerConfig", "max_num_seqs", "greater_than_equal", "Input should be greater than or equal to 1", strconv.Itoa(seqs), "int")
	}
	if batched < 1 {
		return nil, pydanticErr("SchedulerConfig", "max_num_batched_tokens", "greater_than_equal", "Input should be greater than or equal to 1", strconv.Itoa(batched), "int")
	}
	if batched < seqs {
		return nil, startupErr(ErrInvalidArgument, "ValueError",
			"max_num_batched_tokens (%d) must be greater than or equal to max_num_seqs (%d).", batched, seqs)
	}
	total := c.GPUMemoryBytes
	requested := int64(math.Ceil(float64(total) * util))
	free := c.FreeMemoryBytes
	if free == 0 {
		free = total
	}
	if free < requested {
		return nil, startupErr(ErrInsufficientFree, "ValueError",
			"Free memory on device cuda:0 (%s/%s GiB) on startup is less than desired GPU memory utilization (%s, %s GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
			gibRound2(free), gibRound2(total), pyfmt.Float(util), gibRound2(requested))
	}

	capa := &Capacity{
		Model:                p.Name,
		MaxNumSeqs:           seqs,
		MaxNumBatchedTokens:  batched,
		BlockSize:            block,
		GPUMemoryUtilization: util,
		DType:                orAuto(c.DType),
		KVCacheDType:         orAuto(c.KVCacheDType),
		TotalBytes:           total,
		RequestedBytes:       requested,
		WeightBytes:          p.WeightBytes(dtypeBytes),
		ActivationBytes:      p.ActivationBaseBytes + p.ActivationBytesPerToken*int64(batched),
		NonTorchBytes:        p.NonTorchBytes,
		CUDAGraphBytes:       p.CUDAGraphBytes,
		KVBytesPerToken:      p.KVBytesPerToken(kvBytes),
	}
	capa.NonKVBytes = capa.WeightBytes + capa.ActivationBytes + capa.NonTorchBytes + capa.CUDAGraphBytes
	capa.AvailableKVBytes = requested - capa.NonKVBytes
	if capa.AvailableKVBytes <= 0 {
		return nil, startupErr(ErrNoKVCacheMemory, "ValueError",
			"No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.")
	}
	pagePerLayer := int64(block) * 2 * int64(p.NumKVHeads) * int64(p.HeadDim) * int64(kvBytes)
	capa.BlockBytes = pagePerLayer * int64(p.NumLayers)
	capa.NumBlocks = capa.AvailableKVBytes / pagePerLayer / int64(p.NumLayers)
	fitLen := capa.NumBlocks * int64(block) // longest block-rounded length that fits

	if auto {
		maxLen = int(min(fitLen, int64(p.MaxPositionEmbeddings)))
		if c.AllowLongMaxModelLen {
			maxLen = int(fitLen)
		}
	}
	needed := int64(p.NumLayers) * ceilDiv(int64(maxLen), int64(block)) * pagePerLayer
	if maxLen <= 0 || needed > capa.AvailableKVBytes {
		checkLen := maxLen
		if checkLen <= 0 {
			checkLen = p.MaxPositionEmbeddings
			needed = int64(p.NumLayers) * ceilDiv(int64(checkLen), int64(block)) * pagePerLayer
		}
		est := ""
		if fitLen > 0 {
			est = fmt.Sprintf(" Based on the available memory, the estimated maximum model length is %d.", fitLen)
		}
		return nil, startupErr(ErrKVCacheTooSmall, "ValueError",
			"To serve at least one request with the model's max seq len (%d), (%s GiB KV cache is needed, which is larger than the available KV cache memory (%s GiB).%s Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details.",
			checkLen, gibRound2(needed), gibRound2(capa.AvailableKVBytes), est)
	}
	capa.MaxModelLen = maxLen
	capa.MaxConcurrency = float64(capa.NumBlocks) / float64(ceilDiv(int64(maxLen), int64(block)))
	capa.KVCacheTokens = int64(capa.MaxConcurrency * float64(maxLen))
	return capa, nil
}

// CheckMaxModelLen applies vLLM's model-config check of a user-specified
// max_model_len against the profile's max_position_embeddings.
func CheckMaxModelLen(p Profile, maxLen int, allowLong bool) error {
	switch {
	case maxLen <= 0:
		return startupErr(ErrInvalidArgument, "ValueError", "max_model_len must be a positive integer, -1 or 'auto', got %d", maxLen)
	case maxLen > p.MaxPositionEmbeddings && !allowLong:
		return startupErr(ErrMaxModelLenTooLarge, "ValidationError",
			"User-specified max_model_len (%d) is greater than the derived max_model_len (max_position_embeddings=%d or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses absolute position encoding, positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error.",
			maxLen, p.MaxPositionEmbeddings)
	}
	return nil
}

// BlocksFor is the number of KV-cache blocks a sequence of n tokens holds.
func (c *Capacity) BlocksFor(n int) int64 {
	if n <= 0 {
		return 0
	}
	return ceilDiv(int64(n), int64(c.BlockSize))
}

// ConcurrencyLine is vLLM's startup log line for the KV cache, e.g.
// "GPU KV cache size: 249,856 tokens, Maximum concurrency for 65,536 tokens per request: 3.81x".
func (c *Capacity) ConcurrencyLine() string {
	return fmt.Sprintf("GPU KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx",
		pyfmt.Thousands(c.KVCacheTokens), pyfmt.Thousands(int64(c.MaxModelLen)), c.MaxConcurrency)
}

// AvailableKVLine is vLLM's "Available KV cache memory: X GiB" log line.
func (c *Capacity) AvailableKVLine() string {
	return fmt.Sprintf("Available KV cache memory: %.2f GiB", float64(c.AvailableKVBytes)/float64(GiB))
}

// MaxConcurrentRequests is how many max-length requests fit in the KV cache
// at once (the integer part of MaxConcurrency), at least 1.
func (c *Capacity) MaxConcurrentRequests() int {
	return max(1, int(c.MaxConcurrency))
}

// CheckGPUMemoryUtilization applies vLLM's (0, 1] bound with its pydantic
// message. Plan treats 0 as "flag not given"; a server that parsed an
// explicit --gpu-memory-utilization 0 should call this first.
func CheckGPUMemoryUtilization(util float64) error {
	switch {
	case math.IsNaN(util) || math.IsInf(util, 0):
		return pydanticErr("CacheConfig", "gpu_memory_utilization", "finite_number", "Input should be a finite number", pyfmt.Float(util), "float")
	case util <= 0:
		return pydanticErr("CacheConfig", "gpu_memory_utilization", "greater_than", "Input should be greater than 0", pyfmt.Float(util), "float")
	case util > 1:
		return pydanticErr("CacheConfig", "gpu_memory_utilization", "less_than_equal", "Input should be less than or equal to 1", pyfmt.Float(util), "float")
	}
	return nil
}

// pydanticErr formats a single-field pydantic validation error the way vLLM's
// config dataclasses report it.
func pydanticErr(model, field, typ, msg, input, inputType string) *StartupError {
	return startupErr(ErrInvalidArgument, "ValidationError",
		"1 validation error for %s\n%s\n  %s [type=%s, input_value=%s, input_type=%s]", model, field, msg, typ, input, inputType)
}

func orAuto(s string) string {
	if s == "" {
		return "auto"
	}
	return s
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// gibRound2 prints bytes as GiB the way vLLM does: Python's round(x, 2)
// followed by str(), so 36 GiB prints "36.0" and 31.456 GiB "31.46".
func gibRound2(b int64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(float64(b)/float64(GiB), 'f', 2, 64), 64)
	return pyfmt.Float(r)
}
