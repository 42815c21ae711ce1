package scenarios

import "github.com/capbench/capbench/scenarios/agent"

// unscripted are scenarios whose expectations hold for whatever the model
// says: the engine answers as it likes (a real vLLM takes no scripts), and
// only the structure of the capture is checked. They are what `capbench run
// --backend vllm` runs; on the fake they run too, against its unscripted
// replies.
func unscripted() []Scenario {
	plan := agent.Plan{
		Model: DefaultModel,
		// One call, no tools: no tool call, no follow-up, whatever the text.
		Main:        agent.Conversation{Task: "Say hello in one short sentence.", MaxTokens: 256},
		Tools:       []agent.Tool{},
		MaxTurns:    1,
		Attribution: agent.Delivered,
		Reward:      1,
	}
	return withStreamVariants(Scenario{
		Name: "unscripted-single-call",
		Description: "row 1 without a script, for a real vLLM: one call whose text the model chooses; the record's " +
			"response id is the served id, so the single chain is attributed and delivered",
		Row: "1", Agent: agent.OpenAIChat,
		Plan: plan, Unscripted: true, Server: defaultServer(),
		Expect: Expect{MaskSample: false, Checks: append(healthy(1),
			Eq("terminal_attribution.method", "response_id"), Eq("terminal_attribution.chain", "delivered"))},
		Tags: []string{"unscripted"},
	})
}
