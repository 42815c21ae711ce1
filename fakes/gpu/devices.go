package gpu

import (
	"errors"
	"fmt"
	"strings"
)

// Device is a named GPU with the total memory vLLM sees on it
// (cudaMemGetInfo), which is less than the marketing size.
type Device struct {
	Name       string   // e.g. "L40S"
	Aliases    []string // other spellings users type
	TotalBytes int64
}

// gibF converts fractional GiB to bytes.
func gibF(g float64) int64 { return int64(g * float64(GiB)) }

// knownDevices are single-GPU totals as CUDA reports them (docs/plan.md
// lists where each figure comes from).
func knownDevices() []Device {
	return []Device{
		{Name: "RTX 6000 Ada", Aliases: []string{"rtx6000ada", "6000ada", "rtx-6000-ada", "a6000", "rtx a6000"}, TotalBytes: gibF(47.53)},
		{Name: "L40S", Aliases: []string{"l40", "a40"}, TotalBytes: gibF(44.52)},
		{Name: "A100 40GB", Aliases: []string{"a100-40", "a100-40gb", "a100 40", "a100_40gb"}, TotalBytes: gibF(39.39)},
		{Name: "A100 80GB", Aliases: []string{"a100", "a100-80", "a100-80gb", "a100 80", "a100_80gb"}, TotalBytes: gibF(79.14)},
		{Name: "H100", Aliases: []string{"h100-80gb", "h100 80gb", "h100-sxm", "h100_80gb"}, TotalBytes: gibF(79.19)},
		{Name: "H200", Aliases: []string{"h200-141gb", "h200 141gb"}, TotalBytes: gibF(139.81)},
	}
}

// ErrUnknownDevice is returned (wrapped) by LookupDevice.
var ErrUnknownDevice = errors.New("unknown GPU")

func normName(s string) string {
	return strings.NewReplacer(" ", "", "-", "", "_", "").Replace(strings.ToLower(strings.TrimSpace(s)))
}

// LookupDevice finds a named GPU; spaces, dashes, underscores and case are
// ignored ("rtx-6000-ada", "RTX 6000 Ada").
func LookupDevice(name string) (Device, error) {
	want := normName(name)
	for _, d := range knownDevices() {
		if normName(d.Name) == want {
			return d, nil
		}
		for _, a := range d.Aliases {
			if normName(a) == want {
				return d, nil
			}
		}
	}
	return Device{}, fmt.Errorf("%w %q (known: %s; or give a size such as 48GiB)", ErrUnknownDevice, name, strings.Join(DeviceNames(), ", "))
}

// DeviceNames lists the named GPUs in table order.
func DeviceNames() []string {
	var out []string
	for _, d := range knownDevices() {
		out = append(out, d.Name)
	}
	return out
}

// ParseDevice reads a --gpu value: a memory size ("48GiB", "44.52GiB") or a
// GPU name ("L40S"). It returns the total bytes and a label for reports.
func ParseDevice(s string) (int64, string, error) {
	if n, err := ParseBytes(s); err == nil {
		if n <= 0 {
			return 0, "", fmt.Errorf("%w: GPU memory %q must be positive", ErrBadValue, s)
		}
		return n, strings.TrimSpace(s), nil
	}
	d, err := LookupDevice(s)
	if err != nil {
		return 0, "", err
	}
	return d.TotalBytes, fmt.Sprintf("%s (%.2f GiB)", d.Name, float64(d.TotalBytes)/float64(GiB)), nil
}
