package doctor_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/doctor"
	"github.com/capbench/capbench/fakes/gpu"
)

const goodOverlay = `token_id_capture:
  enabled: true
  dir: /tmp/nemo_gym_token_id_captures
responses_api_agents:
  claude_code_agent:
    token_id_capture: true
`

func overlayErrors(src string, forGym bool) []string {
	_, fs := doctor.CheckOverlay([]byte(src), doctor.ConfigOptions{ForGymCommand: forGym})
	var out []string
	for _, f := range fs {
		if f.Severity == doctor.Error {
			out = append(out, f.Rule)
		}
	}
	return out
}

var _ = Describe("doctor config: the overlay as Gym's startup validation sees it", func() {
	DescribeTable("rules",
		func(src, wantRule string) {
			errs := overlayErrors(src, true)
			if wantRule == "" {
				Expect(errs).To(BeEmpty())
				return
			}
			Expect(errs).To(ContainElement(wantRule))
		},
		Entry("the walkthrough's overlay passes", goodOverlay, ""),
		Entry("all_agents instead of the per-agent flag passes", "token_id_capture:\n  enabled: true\n  all_agents: true\n  dir: /tmp/x\n", ""),
		Entry("OmegaConf interpolations pass", "token_id_capture:\n  enabled: ${oc.env:CAPTURE_ON,true}\n  dir: ${oc.env:CAPTURE_DIR}\n  max_mask_fraction: ${oc.env:MAX_MASK,0.05}\nresponses_api_agents:\n  claude_code_agent:\n    token_id_capture: true\n", ""),
		Entry("a sink without dir passes", "token_id_capture:\n  enabled: true\n  all_agents: true\n  sink: my.mod:Sink\n  lineage_store: my.mod:Lineage\n", ""),
		Entry("model_call_capture_dir as the fallback passes", "model_call_capture_dir: /data/cap\ntoken_id_capture:\n  enabled: true\n  all_agents: true\n", ""),
		Entry("unknown key fails", strings.Replace(goodOverlay, "  dir:", "  directory: /x\n  dir:", 1), "config/unknown-key"),
		Entry("enabled without dir or sink fails", "token_id_capture:\n  enabled: true\n  all_agents: true\n", "config/no-dir"),
		Entry("relative dir fails", strings.Replace(goodOverlay, "/tmp/nemo_gym_token_id_captures", "captures", 1), "config/relative-dir"),
		Entry("no agent opted in fails", "token_id_capture:\n  enabled: true\n  dir: /tmp/x\n", "config/no-agent-opt-in"),
		Entry("a string where a bool belongs fails", strings.Replace(goodOverlay, "enabled: true", "enabled: \"yes\"", 1), "config/bad-type"),
		Entry("max_mask_fraction as a percentage fails", strings.Replace(goodOverlay, "  dir:", "  max_mask_fraction: 5\n  dir:", 1), "config/bad-type"),
		Entry("NeMo RL nesting as a plain overlay fails", "env:\n  nemo_gym:\n"+indent(goodOverlay, "    "), "config/nemo-rl-nesting"),
		Entry("invalid YAML fails", "token_id_capture: [\n", "config/yaml"),
		Entry("tool_parser without enable_auto_tools fails", goodOverlay+"policy:\n  generation:\n    vllm_cfg:\n      http_server_serving_chat_kwargs:\n        tool_parser: hermes\n", "config/nemo-rl-tool-parser-alone"),
		Entry("both NeMo RL tool keys pass", goodOverlay+"policy:\n  generation:\n    vllm_cfg:\n      http_server_serving_chat_kwargs:\n        enable_auto_tools: true\n        tool_parser: hermes\n", ""),
		Entry("skip_tokenizer_init fails", goodOverlay+"policy:\n  generation:\n    vllm_cfg:\n      skip_tokenizer_init: true\n", "config/skip-tokenizer-init"),
	)

	It("accepts the NeMo RL nesting in a NeMo RL config (not given to gym)", func() {
		Expect(overlayErrors("env:\n  nemo_gym:\n"+indent(goodOverlay, "    "), false)).To(BeEmpty())
	})

	It("warns about a sink beside a directory and a disabled block", func() {
		_, fs := doctor.CheckOverlay([]byte("token_id_capture:\n  enabled: true\n  all_agents: true\n  dir: /x\n  sink: a.b:C\n  lineage_store: a.b:L\n"), doctor.ConfigOptions{})
		Expect(fs).To(HaveLen(1))
		Expect(fs[0].Rule).To(Equal("config/sink-and-dir"))
		Expect(fs[0].Severity).To(Equal(doctor.Warning))
		Expect(fs[0].Line).To(Equal(4))
		ov, fs := doctor.CheckOverlay([]byte("token_id_capture:\n  enabled: false\n"), doctor.ConfigOptions{})
		Expect(ov.Capture).To(BeFalse())
		Expect(fs[0].Rule).To(Equal("config/not-enabled"))
	})

	It("gives line numbers shifted by the block's place in a page", func() {
		_, fs := doctor.CheckOverlay([]byte("token_id_capture:\n  enabled: true\n  dir: rel\n  all_agents: true\n"), doctor.ConfigOptions{File: "p.md", LineOffset: 10})
		Expect(fs).To(HaveLen(1))
		Expect(fs[0].Line).To(Equal(13))
		Expect(fs[0].File).To(Equal("p.md"))
	})
})

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = pre + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

var _ = Describe("doctor config: vLLM serve flags", func() {
	serve := func(args string) doctor.Serve {
		s, err := doctor.ParseServe(strings.Fields("vllm serve "+args), nil)
		Expect(err).NotTo(HaveOccurred())
		return s
	}
	DescribeTable("rules",
		func(args, gpuSize, wantRule string) {
			var total int64
			if gpuSize != "" {
				var err error
				total, _, err = gpu.ParseDevice(gpuSize)
				Expect(err).NotTo(HaveOccurred())
			}
			fs := doctor.CheckServe(serve(args), doctor.ServeOptions{GPUBytes: total, GPULabel: gpuSize})
			var errs []string
			for _, f := range fs {
				if f.Severity == doctor.Error {
					errs = append(errs, f.Rule)
				}
			}
			if wantRule == "" {
				Expect(errs).To(BeEmpty(), "%+v", fs)
				return
			}
			Expect(errs).To(ContainElement(wantRule), "%+v", fs)
		},
		Entry("the walkthrough's flags on 48 GiB pass", "Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser hermes --max-model-len 65536", "48GiB", ""),
		Entry("tool parser alone fails", "Qwen/Qwen3-4B-Thinking-2507 --tool-call-parser hermes --max-model-len 65536", "48GiB", "serve/tool-parser-alone"),
		Entry("auto tool choice alone fails", "Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --max-model-len 65536", "", "serve/auto-tools-alone"),
		Entry("no tool flags fails", "Qwen/Qwen3-4B-Thinking-2507 --max-model-len 65536", "", "serve/no-tool-flags"),
		Entry("default context on 48 GiB fails", "Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser hermes", "48GiB", "serve/refuses-to-start"),
		Entry("default context on an H200 passes", "Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser hermes", "H200", ""),
		Entry("a 32k context cannot hold 32,000 output tokens and the prompt", "Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser hermes --max-model-len 32768", "48GiB", "serve/context-too-small"),
		Entry("--max_model_len=40k (snake case, = form) fails the same way", "Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser=hermes --max_model_len=32k", "48GiB", "serve/context-too-small"),
		Entry("skip tokenizer fails", "m --enable-auto-tool-choice --tool-call-parser hermes --skip-tokenizer-init", "", "serve/skip-tokenizer-init"),
		Entry("a bad length fails", "Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser hermes --max-model-len 1.5K", "48GiB", "serve/bad-value"),
	)

	It("suggests 65536 and quotes vLLM's refusal", func() {
		fs := doctor.CheckServe(serve("Qwen/Qwen3-4B-Thinking-2507 --enable-auto-tool-choice --tool-call-parser hermes"), doctor.ServeOptions{GPUBytes: 48 * gpu.GiB, GPULabel: "48GiB"})
		Expect(fs).To(HaveLen(1))
		Expect(fs[0].Fix).To(Equal("set --max-model-len 65536"))
		Expect(fs[0].Message).To(ContainSubstring("ValueError: To serve at least one request with the model's max seq len (262144)"))
	})

	It("refuses a flag without its value", func() {
		_, err := doctor.ParseServe(strings.Fields("vllm serve m --max-model-len"), nil)
		Expect(err).To(MatchError(ContainSubstring("--max-model-len needs a value")))
	})
})

var _ = Describe("doctor config: NeMo RL's vllm_cfg on a GPU", func() {
	nemoRL := func(maxLen string) string {
		return "policy:\n  model_name: Qwen/Qwen3-4B-Thinking-2507\n  max_total_sequence_length: " + maxLen + "\n  generation:\n    vllm_cfg:\n" +
			"      max_model_len: ${policy.max_total_sequence_length}\n      http_server_serving_chat_kwargs:\n        enable_auto_tools: true\n        tool_parser: hermes\n" +
			"env:\n  nemo_gym:\n" + indent(goodOverlay, "    ")
	}
	check := func(src, gpuName string) *doctor.Report {
		p := filepath.Join(GinkgoT().TempDir(), "grpo.yaml")
		Expect(os.WriteFile(p, []byte(src), 0o644)).To(Succeed())
		rep, err := doctor.CheckConfig(doctor.ConfigCheck{Path: p, GPU: gpuName})
		Expect(err).NotTo(HaveOccurred())
		return rep
	}
	DescribeTable("max_model_len through a ${policy...} reference",
		func(maxLen, gpuName, wantRule string, wantLine int) {
			rep := check(nemoRL(maxLen), gpuName)
			var got []string
			for _, f := range rep.Findings {
				if strings.HasPrefix(f.Rule, "serve/") {
					got = append(got, fmt.Sprintf("%s@%d", f.Rule, f.Line))
				}
			}
			if wantRule == "" {
				Expect(got).To(BeEmpty())
				return
			}
			Expect(got).To(Equal([]string{fmt.Sprintf("%s@%d", wantRule, wantLine)}))
		},
		Entry("65536 on 48 GiB passes", "65536", "48GiB", "", 0),
		Entry("262144 on 48 GiB refuses to start", "262144", "48GiB", "serve/refuses-to-start", 6),
		Entry("262144 on an H200 passes", "262144", "H200", "", 0),
		Entry("32768 cannot hold 32,000 output tokens", "32768", "48GiB", "serve/context-too-small", 6),
	)
})
