// Package gpu holds the suite that runs scripted agents against a real vLLM
// container on a GPU (image, model and flags from the walkthrough). It skips
// with a clear reason unless CAPBENCH_GPU=1, a container engine, an NVIDIA
// runtime and the image (present locally; never pulled) are all available.
package gpu
