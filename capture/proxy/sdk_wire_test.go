package proxy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/capbench/capbench/capture/proxy"
	"github.com/capbench/capbench/capture/record"
	"github.com/capbench/capbench/fakes/vllm"
)

// What the fake generates for the scripts the node clients name in their
// X-Fake-Script header.
const (
	sdkReasoning   = "The user wants the weather in Paris, so I call the tool."
	sdkWeatherText = "It is sunny in Paris, 21 degrees."
	sdkLookupText  = "Let me look that up."
	sdkGreeting    = "Hello from the fake engine!"
	sdkAPIKey      = "sdk-wire-key"
)

// sdkParallel are the cities of openai.mjs's concurrent conversations.
var sdkParallel = []string{"Rome", "Lima", "Kyiv", "Accra"}

var sdkScripts = []vllm.Script{
	{Name: "weather", Turns: []vllm.Turn{
		{Reasoning: sdkReasoning, ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Paris"}`}}},
		{Content: sdkWeatherText},
	}},
	{Name: "stream-tool", Turns: []vllm.Turn{
		{Content: sdkLookupText, ToolCalls: []vllm.ScriptToolCall{{Name: "get_weather", Arguments: `{"city": "Oslo"}`}}},
	}},
	{Name: "greeting", Turns: []vllm.Turn{{Content: sdkGreeting}}},
}

type sdkTool struct {
	Name      string         `json:"name"`
	Input     map[string]any `json:"input"`     // Anthropic
	Arguments map[string]any `json:"arguments"` // OpenAI
}

type sdkAnthropicUsage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
}

type sdkOpenAIUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
}

type sdkAPIError struct {
	Status  int    `json:"status"`
	Type    string `json:"type"`
	Message string `json:"message"`
}

// anthropicResults is what anthropic.mjs prints.
type anthropicResults struct {
	OK      bool `json:"ok"`
	Results struct {
		Tools struct {
			First struct {
				ID         string            `json:"id"`
				Tool       sdkTool           `json:"tool"`
				Thinking   *string           `json:"thinking"`
				Usage      sdkAnthropicUsage `json:"usage"`
				BlockTypes []string          `json:"block_types"`
			} `json:"first"`
			Second struct {
				ID    string            `json:"id"`
				Text  string            `json:"text"`
				Usage sdkAnthropicUsage `json:"usage"`
			} `json:"second"`
			CountTokens int `json:"count_tokens"`
		} `json:"tools"`
		LongTools struct {
			Text string `json:"text"`
		} `json:"long_tools"`
		Stream struct {
			ID         string            `json:"id"`
			Text       string            `json:"text"`
			Tool       sdkTool           `json:"tool"`
			Events     int               `json:"events"`
			EventTypes []string          `json:"event_types"`
			Usage      sdkAnthropicUsage `json:"usage"`
		} `json:"stream"`
		StreamChain struct {
			First struct {
				ID         string  `json:"id"`
				Thinking   string  `json:"thinking"`
				Signatures int     `json:"signatures"`
				Tool       sdkTool `json:"tool"`
			} `json:"first"`
			Second struct {
				ID   string `json:"id"`
				Text string `json:"text"`
			} `json:"second"`
		} `json:"stream_chain"`
		Errors struct {
			Upstream400 sdkAPIError `json:"upstream400"`
			Engine503   sdkAPIError `json:"engine503"`
			Auth401     sdkAPIError `json:"auth401"`
		} `json:"errors"`
	} `json:"results"`
}

// openAIResults is what openai.mjs prints.
type openAIResults struct {
	OK      bool `json:"ok"`
	Results struct {
		Chat struct {
			First struct {
				Tool  sdkTool        `json:"tool"`
				Usage sdkOpenAIUsage `json:"usage"`
			} `json:"first"`
			Second struct {
				Text   string         `json:"text"`
				Chunks int            `json:"chunks"`
				Usage  sdkOpenAIUsage `json:"usage"`
			} `json:"second"`
		} `json:"chat"`
		LongChat struct {
			Text string `json:"text"`
		} `json:"long_chat"`
		Helper struct {
			Text string  `json:"text"`
			Tool sdkTool `json:"tool"`
		} `json:"helper"`
		Responses struct {
			First struct {
				ID   string  `json:"id"`
				Tool sdkTool `json:"tool"`
			} `json:"first"`
			Second struct {
				ID   string `json:"id"`
				Text string `json:"text"`
			} `json:"second"`
		} `json:"responses"`
		ResponsesStream struct {
			ID         string   `json:"id"`
			Text       string   `json:"text"`
			EventTypes []string `json:"event_types"`
		} `json:"responses_stream"`
		Parallel []struct {
			City string  `json:"city"`
			Tool sdkTool `json:"tool"`
			Text string  `json:"text"`
		} `json:"parallel"`
		Errors struct {
			Refused sdkAPIError `json:"refused"`
		} `json:"errors"`
	} `json:"results"`
}

var _ = Describe("wire compatibility with the official SDK clients", Label("npm", "e2e"), func() {
	DescribeTable("the Anthropic and OpenAI npm clients get correct replies and every call is captured exactly",
		func(ctx SpecContext, storeKind string, requestTokenIDs bool) {
			node := sdkNode()
			fake, err := vllm.New(vllm.Options{EnableAutoToolChoice: true, ToolCallParser: "hermes", ReasoningParser: "qwen3"})
			Expect(err).NotTo(HaveOccurred())
			fctx, cancel := context.WithCancel(context.Background())
			DeferCleanup(cancel)
			Expect(fake.Start(fctx)).To(Succeed())
			DeferCleanup(fake.Close)
			for _, s := range sdkScripts {
				Expect(fake.SetScript(s)).To(Succeed())
			}
			st := newStore(storeKind)
			p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) {
				o.Model = vllm.DefaultModel
				o.APIKey = sdkAPIKey
				o.RequestTokenIDs = requestTokenIDs
			})
			prefix := "sdk-" + storeKind
			env := map[string]string{"PROXY_URL": p.URL(), "PROXY_API_KEY": sdkAPIKey, "ROLLOUT_PREFIX": prefix,
				"PARALLEL_CITIES": strings.Join(sdkParallel, ",")}
			rollout := func(name string) string { return prefix + "-" + name }

			var ant anthropicResults
			runSDKScript(ctx, node, "anthropic.mjs", env, &ant)
			var oai openAIResults
			runSDKScript(ctx, node, "openai.mjs", env, &oai)
			Expect(ant.OK).To(BeTrue())
			Expect(oai.OK).To(BeTrue())

			By("freezing every rollout and matching each record with the engine's ledger, bit for bit")
			led := fake.Ledger()
			frozen := map[string][]*record.Entry{}
			used := map[int]string{}
			ledgerOf := map[string]vllm.LedgerEntry{} // by model call id
			want := map[string]int{
				"tools": 2, "long-tools": 2, "stream": 1, "stream-chain": 2, // Anthropic
				"chat": 2, "long-chat": 2, "helper": 1, "responses": 2, "responses-stream": 1, // OpenAI
			}
			chains := []string{"tools", "long-tools", "stream-chain", "chat", "long-chat", "responses"}
			for i := range sdkParallel {
				name := fmt.Sprintf("parallel-%d", i)
				want[name] = 2
				chains = append(chains, name)
			}
			for name, calls := range want {
				snap, err := st.Freeze(ctx, rollout(name))
				Expect(err).NotTo(HaveOccurred(), name)
				Expect(snap.Incomplete).To(BeFalse(), name)
				Expect(snap.Entries).To(HaveLen(calls), name)
				for _, e := range snap.Entries {
					Expect(e.RolloutID).To(Equal(rollout(name)))
					Expect(e.Model).To(Equal(vllm.DefaultModel))
					i := ledgerIndexByPrompt(led, e)
					Expect(used).NotTo(HaveKey(i), "two records claim ledger entry %d", i)
					used[i] = name
					ledgerOf[e.ModelCallID] = led[i]
					Expect(e.GenerationTokenIDs).To(Equal(led[i].GeneratedTokenIDs), name)
					Expect(sameBits(e.GenerationLogProbs, led[i].LogProbs)).To(BeTrue(),
						"%s: log-probs differ\n got %v\nwant %v", name, e.GenerationLogProbs, led[i].LogProbs)
				}
				frozen[name] = snap.Entries
			}
			// Every generation the engine made belongs to exactly one record:
			// the refused and failed calls generated nothing.
			Expect(used).To(HaveLen(len(led)))

			By("chaining the multi-turn calls")
			for _, name := range chains {
				root, child := rootAndChild(frozen[name])
				Expect(*child.ParentResolution).To(Equal(record.ResolutionResolved), "%s: %s", name, child.ParentResolutionReason)
				Expect(child.ParentCallID).NotTo(BeNil(), name)
				Expect(*child.ParentCallID).To(Equal(root.ModelCallID), name)
				// The follow-up prompt extends the first prompt and its generation.
				Expect(len(child.PromptTokenIDs)).To(BeNumerically(">", len(root.PromptTokenIDs)+len(root.GenerationTokenIDs)), name)
				Expect(child.PromptTokenIDs[:len(root.PromptTokenIDs)]).To(Equal(root.PromptTokenIDs), name)
			}
			for _, name := range []string{"stream", "helper", "responses-stream"} {
				Expect(*frozen[name][0].ParentResolution).To(Equal(record.ResolutionRoot), name)
			}

			By("checking what the Anthropic client saw against the script and the records")
			a := ant.Results
			aRoot, aChild := rootAndChild(frozen["tools"])
			paris := map[string]any{"city": "Paris"}
			Expect(a.Tools.First.Tool).To(Equal(sdkTool{Name: "get_weather", Input: paris}))
			// The qwen3 reasoning parser keeps the newlines around the text
			// inside <think>, as vLLM's does.
			Expect(a.Tools.First.Thinking).To(HaveValue(WithTransform(strings.TrimSpace, Equal(sdkReasoning))))
			Expect(a.Tools.First.BlockTypes).To(Equal([]string{"thinking", "tool_use"}))
			Expect(a.Tools.Second.Text).To(Equal(sdkWeatherText))
			Expect(a.LongTools.Text).To(Equal(sdkWeatherText))
			Expect(p.ConversationHeld(rollout("long-tools"))).To(BeTrue(), "the long conversation was carried from call to call")
			Expect(aRoot.ResponseID).To(HaveValue(Equal(a.Tools.First.ID)))
			Expect(aChild.ResponseID).To(HaveValue(Equal(a.Tools.Second.ID)))
			Expect(a.Tools.First.Usage).To(Equal(sdkAnthropicUsage{len(aRoot.PromptTokenIDs), len(aRoot.GenerationTokenIDs)}))
			Expect(a.Tools.Second.Usage).To(Equal(sdkAnthropicUsage{len(aChild.PromptTokenIDs), len(aChild.GenerationTokenIDs)}))
			Expect(a.Tools.CountTokens).To(Equal(len(aRoot.PromptTokenIDs)))
			// The hermes parser hands back the text before <tool_call> as
			// it is, newline included, as vLLM's does.
			Expect(a.Stream.Text).To(Equal(textBeforeToolCall(ledgerOf[frozen["stream"][0].ModelCallID])))
			Expect(strings.TrimSpace(a.Stream.Text)).To(Equal(sdkLookupText))
			Expect(a.Stream.Tool).To(Equal(sdkTool{Name: "get_weather", Input: map[string]any{"city": "Oslo"}}))
			sRoot, sChild := rootAndChild(frozen["stream-chain"])
			Expect(strings.TrimSpace(a.StreamChain.First.Thinking)).To(Equal(sdkReasoning))
			Expect(a.StreamChain.First.Signatures).To(BeNumerically(">=", 1), "a signature_delta for the thinking block")
			Expect(a.StreamChain.First.Tool).To(Equal(sdkTool{Name: "get_weather", Input: paris}))
			Expect(a.StreamChain.Second.Text).To(Equal(sdkWeatherText))
			Expect(sRoot.ResponseID).To(HaveValue(Equal(a.StreamChain.First.ID)))
			Expect(sChild.ResponseID).To(HaveValue(Equal(a.StreamChain.Second.ID)))
			Expect(a.Stream.EventTypes).To(ContainElements("message_start", "content_block_start", "content_block_delta",
				"content_block_stop", "message_delta", "message_stop"))
			Expect(frozen["stream"][0].ResponseID).To(HaveValue(Equal(a.Stream.ID)))
			Expect(a.Stream.Usage).To(Equal(sdkAnthropicUsage{len(frozen["stream"][0].PromptTokenIDs), len(frozen["stream"][0].GenerationTokenIDs)}))

			By("checking the typed errors and that failed calls left no record")
			Expect(a.Errors.Upstream400).To(haveAPIError(400, "invalid_request_error"))
			Expect(a.Errors.Engine503).To(haveAPIError(503, "overloaded_error"))
			Expect(a.Errors.Auth401).To(haveAPIError(401, "authentication_error"))
			Expect(oai.Results.Errors.Refused.Status).To(Equal(400))
			// Both scripts send their failing calls to the same "errors" rollout.
			Expect(entries(ctx, st, rollout("errors"))).To(BeEmpty())
			Expect(incomplete(ctx, st, rollout("errors"))).To(BeTrue())
			lister, ok := st.(interface {
				Rollouts(context.Context) ([]string, error)
			})
			Expect(ok).To(BeTrue(), "the %s store lists its rollouts", storeKind)
			ids, err := lister.Rollouts(ctx)
			Expect(err).NotTo(HaveOccurred())
			Expect(ids).NotTo(ContainElement(rollout("auth")), "a call refused for its key touched the store")

			By("checking what the OpenAI client saw against the script and the records")
			o := oai.Results
			Expect(o.LongChat.Text).To(Equal(sdkWeatherText))
			Expect(p.ConversationHeld(rollout("long-chat"))).To(BeTrue(), "the long conversation was carried from call to call")
			cRoot, cChild := rootAndChild(frozen["chat"])
			Expect(o.Chat.First.Tool).To(Equal(sdkTool{Name: "get_weather", Arguments: paris}))
			Expect(o.Chat.First.Usage).To(Equal(sdkOpenAIUsage{len(cRoot.PromptTokenIDs), len(cRoot.GenerationTokenIDs)}))
			Expect(o.Chat.Second.Text).To(Equal(sdkWeatherText))
			Expect(o.Chat.Second.Usage).To(Equal(sdkOpenAIUsage{len(cChild.PromptTokenIDs), len(cChild.GenerationTokenIDs)}))
			Expect(o.Helper.Text).To(Equal(textBeforeToolCall(ledgerOf[frozen["helper"][0].ModelCallID])))
			Expect(strings.TrimSpace(o.Helper.Text)).To(Equal(sdkLookupText))
			Expect(o.Helper.Tool).To(Equal(sdkTool{Name: "get_weather", Arguments: map[string]any{"city": "Oslo"}}))
			rRoot, rChild := rootAndChild(frozen["responses"])
			Expect(o.Responses.First.Tool).To(Equal(sdkTool{Name: "get_weather", Arguments: paris}))
			Expect(o.Responses.Second.Text).To(Equal(sdkWeatherText))
			Expect(rRoot.ResponseID).To(HaveValue(Equal(o.Responses.First.ID)))
			Expect(rChild.ResponseID).To(HaveValue(Equal(o.Responses.Second.ID)))
			Expect(o.Parallel).To(HaveLen(len(sdkParallel)))
			for i, conv := range o.Parallel {
				Expect(conv.City).To(Equal(sdkParallel[i]))
				Expect(conv.Tool).To(Equal(sdkTool{Name: "get_weather", Arguments: paris}))
				Expect(conv.Text).To(Equal(sdkWeatherText))
			}
			Expect(o.ResponsesStream.Text).To(Equal(sdkGreeting))
			Expect(o.ResponsesStream.EventTypes).To(ContainElements("response.created", "response.output_text.delta", "response.completed"))
			Expect(frozen["responses-stream"][0].ResponseID).To(HaveValue(Equal(o.ResponsesStream.ID)))

			By("checking the records' output items carry the calls the clients saw")
			for name, want := range map[string]string{"tools": "Paris", "chat": "Paris", "responses": "Paris", "stream": "Oslo", "helper": "Oslo"} {
				root := frozen[name][0]
				if len(frozen[name]) == 2 {
					root, _ = rootAndChild(frozen[name])
				}
				Expect(outputText(root.OutputItems)).To(And(ContainSubstring("get_weather"), ContainSubstring(want)), name)
			}
		},
		Entry("memory store, prompt ids from /tokenize", "memory", false, SpecTimeout(time.Minute)),
		Entry("file store, prompt ids from return_token_ids", "file", true, SpecTimeout(time.Minute)),
	)
})

// haveAPIError checks an SDK error's status and Anthropic error type.
func haveAPIError(status int, errType string) OmegaMatcher {
	return And(
		WithTransform(func(e sdkAPIError) int { return e.Status }, Equal(status)),
		WithTransform(func(e sdkAPIError) string { return e.Type }, Equal(errType)),
	)
}

// textBeforeToolCall is the content the hermes parser leaves in front of
// the first tool call of a generation.
func textBeforeToolCall(l vllm.LedgerEntry) string {
	before, _, found := strings.Cut(l.Text, "<tool_call>")
	ExpectWithOffset(1, found).To(BeTrue(), "the generation has no tool call: %q", l.Text)
	return before
}

// outputText is a record's output items as JSON text, whatever dialect
// shaped them (Responses items or a chat message with tool_calls).
func outputText(items []record.Item) string {
	b, err := json.Marshal(items)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return string(b)
}

// streamTiming is what stream_timing.mjs prints per dialect.
type streamTiming struct {
	FirstTextMS float64 `json:"first_text_ms"`
	EndMS       float64 `json:"end_ms"`
	Events      int     `json:"events"`
	Text        string  `json:"text"`
}

var _ = Describe("the official SDK clients reading a stream", Label("npm", "e2e"), func() {
	It("get the first text while the engine is still generating, in every dialect", func(ctx SpecContext) {
		node := sdkNode()
		words := strings.Repeat("story ", 40)
		fake, err := vllm.New(vllm.Options{Timing: vllm.Timing{InterTokenLatency: 20 * time.Millisecond}})
		Expect(err).NotTo(HaveOccurred())
		Expect(fake.Start(context.Background())).To(Succeed())
		DeferCleanup(fake.Close)
		Expect(fake.SetScript(vllm.Script{Name: "slow", Turns: []vllm.Turn{{Content: words}}})).To(Succeed())
		st := newStore("memory")
		p := startProxy(ctx, fake.URL(), st, func(o *proxy.Options) { o.Model = vllm.DefaultModel; o.APIKey = sdkAPIKey })
		var out struct {
			OK      bool                    `json:"ok"`
			Results map[string]streamTiming `json:"results"`
		}
		runSDKScript(ctx, node, "stream_timing.mjs", map[string]string{"PROXY_URL": p.URL(), "PROXY_API_KEY": sdkAPIKey, "ROLLOUT_PREFIX": "st"}, &out)
		Expect(out.OK).To(BeTrue())
		for _, d := range []string{"messages", "chat", "responses"} {
			r := out.Results[d]
			Expect(r.Text).To(Equal(words), d)
			Expect(r.EndMS).To(BeNumerically(">", 500), d+": the generation must take a while for this to mean anything")
			Expect(r.FirstTextMS).To(BeNumerically("<", r.EndMS/4), d+": the first text must arrive long before the end")
			Expect(r.Events).To(BeNumerically(">", 20), d)
			Expect(entries(ctx, st, "st-"+d)).To(HaveLen(1), d)
		}
	})
})
