package gpu

import "errors"

// Forecast is the planner's answer for one configuration: whether vLLM
// starts, what it would log, and how many agent calls of a given length the
// KV cache holds at once. It is computed by Plan, the code the fake vLLM
// runs at startup, so the planner and the fake cannot disagree.
type Forecast struct {
	// Starts is false when vLLM would refuse to start; Refusal then holds
	// vLLM's exception and message.
	Starts  bool
	Refusal *StartupError
	// Capacity is the startup plan (nil when vLLM refuses).
	Capacity *Capacity
	// RequestTokens is one agent call's peak length: prompt + max_tokens.
	RequestTokens int
	// FitsRequest reports whether one such call fits max_model_len (vLLM
	// answers 400 to a longer one).
	FitsRequest bool
	// ConcurrentRequests is how many such calls the KV cache holds at once:
	// floor(num_blocks / ceil(RequestTokens / block_size)), capped at
	// max_num_seqs; 0 when the call does not fit.
	ConcurrentRequests int
	// LargestMaxModelLen is the largest --max-model-len that starts with the
	// other settings unchanged (0 when none does).
	LargestMaxModelLen int
}

// Predict runs the startup plan for c and sizes requestTokens-long calls.
// Errors are only for inputs Plan cannot judge at all; vLLM refusals
// (including bad engine arguments) come back in the Forecast.
func Predict(c Config, requestTokens int) (Forecast, error) {
	f := Forecast{RequestTokens: requestTokens}
	if requestTokens < 0 {
		return f, errors.New("request tokens must not be negative")
	}
	auto := c
	auto.MaxModelLen = -1
	if capa, err := Plan(auto); err == nil {
		f.LargestMaxModelLen = capa.MaxModelLen
	}
	capa, err := Plan(c)
	if err != nil {
		var se *StartupError
		if !errors.As(err, &se) {
			return f, err
		}
		f.Refusal = se
		return f, nil
	}
	f.Starts, f.Capacity = true, capa
	f.FitsRequest = requestTokens <= capa.MaxModelLen
	if f.FitsRequest && requestTokens > 0 {
		n := capa.NumBlocks / capa.BlocksFor(requestTokens)
		f.ConcurrentRequests = int(min(n, int64(capa.MaxNumSeqs)))
	}
	return f, nil
}
