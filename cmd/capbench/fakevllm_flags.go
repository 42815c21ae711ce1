package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/capbench/capbench/fakes/gpu"
	"github.com/capbench/capbench/fakes/vllm"
)

// vLLM 0.29's choices for the dtype flags.
var (
	dtypeChoices   = []string{"auto", "half", "float16", "bfloat16", "float", "float32"}
	kvDTypeChoices = []string{"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"}
)

// mayBeNegative are the numeric flags whose negative values mean something.
var mayBeNegative = map[string]bool{"seed": true}

// checkFakeFlags rejects, before the server starts and in the flag's own
// name, values the fake would misread or vLLM would refuse.
func checkFakeFlags(f *pflag.FlagSet, o vllm.Options, gpuMemory string) error {
	if err := choice("--dtype", o.DType, dtypeChoices); err != nil {
		return err
	}
	if err := choice("--kv-cache-dtype", o.KVCacheDType, kvDTypeChoices); err != nil {
		return err
	}
	var err error
	f.VisitAll(func(fl *pflag.Flag) {
		if err != nil || mayBeNegative[fl.Name] || !fl.Changed {
			return
		}
		if negative(fl) {
			err = fmt.Errorf("--%s %s: must not be negative", fl.Name, fl.Value.String())
		}
	})
	if err != nil {
		return err
	}
	if r := o.Faults.Rate; r > 1 {
		return fmt.Errorf("--fault-rate %v: want a probability in [0, 1]", r)
	}
	if u := o.GPUMemoryUtilization; u <= 0 || u > 1 {
		return fmt.Errorf("--gpu-memory-utilization %v: want a fraction in (0, 1]", u)
	}
	if gpuMemory != "" && strings.TrimFunc(gpuMemory, func(r rune) bool { return r >= '0' && r <= '9' || r == '.' }) == "" {
		return fmt.Errorf("--gpu-memory %s: give a unit, e.g. %sGiB (a bare number would be bytes)", gpuMemory, gpuMemory)
	}
	return nil
}

func choice(flag, v string, choices []string) error {
	if slices.Contains(choices, v) {
		return nil
	}
	quoted := make([]string, len(choices))
	for i, c := range choices {
		quoted[i] = "'" + c + "'"
	}
	return fmt.Errorf("argument %s: invalid choice: '%s' (choose from %s)", flag, v, strings.Join(quoted, ", "))
}

func negative(fl *pflag.Flag) bool {
	s := fl.Value.String()
	switch fl.Value.Type() {
	case "duration":
		d, err := time.ParseDuration(s)
		return err == nil && d < 0
	case "int", "int64", "float64":
		x, err := strconv.ParseFloat(s, 64)
		return err == nil && x < 0
	}
	return false
}

// warnProfile says which memory profile the GPU memory model uses when the
// model has none of its own.
func warnProfile(w io.Writer, o vllm.Options) {
	if o.GPUMemory == 0 || o.Profile != "" {
		return
	}
	if _, err := gpu.LookupProfile(o.Model); err == nil {
		return
	}
	fmt.Fprintf(w, "capbench fake-vllm: no memory profile for model %q; the GPU memory model uses %s's geometry (pass --profile; known: %s)\n",
		o.Model, vllm.DefaultModel, strings.Join(gpu.ProfileNames(), ", "))
}
