package profile

// The built-in profiles, in the order a Table tries them: providers by
// host first, then model families by name (self-hosted servers: vLLM,
// SGLang, llama.cpp render with the model's template), then Unknown.
//
// Facts and sources are those of ../shared/RENDERING.md (sections 1–4);
// "[llama.cpp@X] file" is ggml-org/llama.cpp models/templates/file at
// commit X, copied into fixtures/templates (see its SOURCES.md). Prices
// are per million tokens in US dollars; zero is unknown.

// resendsSession is F (RENDERING.md §4.2) for upstreams that render a
// block for the rest of the session (DeepSeek V4 with tools): a low
// estimate of the requests an agent makes after a step (the embedded
// demo's two short turns make seven requests). A block shaped near the
// end of a session, with fewer re-sends than F, loses what its break
// cost; a low F keeps those few and the margin of the rest on the right
// side. At r = 0.02 and F = 4 a block pays from about 11 times its shaped
// size (a 240-character extract: blocks over about 2,600 characters).
const resendsSession = 4

// resendsLoop is F for upstreams that render a block only until the end
// of its tool loop (the next user turn drops it): a low estimate of the
// steps left in a loop.
const resendsLoop = 2

// Unknown is the profile of an upstream no built-in or configured profile
// matches. It assumes every reasoning block is rendered (DeepSeek V4 and
// GLM preserved thinking do render them all) and knows no price, so the
// cache-aware shaping policy shapes nothing there: no block is surely
// outside the prompt, and without prices no cache break can be shown to
// pay. Its review notice is a user message, the one placement every
// template of RENDERING.md §3 renders in place with a role (system
// messages are moved, dropped or written without a role by several).
var Unknown = Profile{
	Name: "unknown", Family: "unknown upstream (safe defaults)",
	Earlier: EarlierKept, TurnRendered: true, Boundary: BoundaryUser,
	Field: "reasoning_content", Notice: []Placement{PlaceUser, PlaceToolResult},
	Source: "RENDERING.md §1–§3: no family renders less than 'everything' for sure; §3: user lands in place with a role in every template",
}

// The review child keeps the primary's tools so its prefix is cached;
// ChildToolChoice "none" is set only for self-hosted families, whose
// servers (vLLM, SGLang) still give the template the tools with
// tool_choice "none". Hosted APIs get none: DeepSeek answers 400 to a
// forced tool_choice in thinking mode and documents nothing about
// "none"; the others are unknown.

// builtins returns the built-in profiles in matching order (a fresh
// slice: callers may change it).
func builtins() []Profile {
	return []Profile{
		{
			Name: "openrouter", Family: "OpenRouter (any model)",
			Match:   []Selector{{Upstream: "openrouter.ai"}},
			Earlier: EarlierKept, TurnRendered: true, Boundary: BoundaryUser,
			Field: "reasoning", Notice: []Placement{PlaceUser, PlaceToolResult}, Frozen: true,
			Source: "openrouter.ai/docs/use-cases/reasoning-tokens: pass reasoning_details back unmodified, \"you cannot rearrange or modify\" (RENDERING.md §2, PROTOCOLS.md rule 2); rendering and caching are the routed upstream's (unknown here)",
		},
		{
			Name: "dashscope", Family: "Alibaba Model Studio (DashScope, Qwen)",
			Match:   []Selector{{Upstream: "dashscope*.aliyuncs.com"}},
			Earlier: EarlierDropped, TurnRendered: true, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceSystem, PlaceToolPair, PlaceToolResult},
			Resends: resendsLoop, Template: "qwen3",
			Prices: Prices{Ratio: 0.2, Note: "implicit cache: a hit costs 20% of the input price (help.aliyun.com/zh/model-studio/context-cache; alibabacloud.com/help/en/model-studio/context-cache); absolute prices depend on the model"},
			Source: "rendering assumed to be the Qwen3 template's ([llama.cpp@e121edc4] Qwen-Qwen3-0.6B.jinja: reasoning after the last user query kept, earlier dropped, system in place); DashScope's own passback rules are not documented (RENDERING.md §2)",
		},
		{
			Name: "deepseek-v4", Family: "DeepSeek API (V4: deepseek-chat, deepseek-reasoner, deepseek-v4-*)",
			Match: []Selector{{Upstream: "api.deepseek.com"}, {Model: "deepseek-chat"}, {Model: "deepseek-reasoner"},
				{Model: "*deepseek-v4*"}, {Model: "deepseek-flash*"}},
			Earlier: EarlierKeptWithTools, TurnRendered: true, Boundary: BoundaryUserOrTool,
			Field: "reasoning_content", Notice: []Placement{PlaceUser, PlaceToolResult},
			Resends: resendsSession, Template: "deepseek-v4",
			Prices: Prices{HitPerM: 0.003, MissPerM: 0.15,
				Note: "deepseek-flash off-peak (api-docs.deepseek.com quick_start/pricing snapshot; peak hours double both; deepseek-v4-pro $0.022/$0.66); output price not in RENDERING.md"},
			Source: "[dsv4] encoding_dsv4.py (HF deepseek-ai/DeepSeek-V4-*; vllm deepseek_v4_encoding.py@591f7b5e) and its golden tests (fixtures/templates/deepseek-v4-tests): with tools every reasoning is kept, tool results are user turns, a system message is raw text without a role; API docs guides/thinking_mode: tool-call turns' reasoning must be passed back in all later requests (RENDERING.md §1, §2, §4.3: notice as a user message)",
		},
		{
			Name: "deepseek-v3.2", Family: "DeepSeek-V3.2 (self-hosted, Python encoder)",
			Match:   []Selector{{Model: "*deepseek-v3.2*"}},
			Earlier: EarlierDropped, TurnRendered: true, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceToolPair, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop,
			Source: "[dsv32] encoding_dsv32.py (HF deepseek-ai/DeepSeek-V3.2; sglang, vllm copies): reasoning only after the last user message; system raw in place; user breaks at the turn (RENDERING.md §1, §3, §4.3: synthetic tool pair)",
		},
		{
			Name: "deepseek-v3.1", Family: "DeepSeek-V3.1 / V3.1-Terminus (self-hosted)",
			Match:   []Selector{{Model: "*deepseek-v3.1*"}},
			Earlier: EarlierDropped, TurnRendered: false, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceUser, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "deepseek-v3.1",
			Source: "[llama.cpp@88021565] deepseek-ai-DeepSeek-V3.1.jinja: no reasoning_content rendered; system moved to the front (RENDERING.md §1, §3, §4.3: user in place, append-only)",
		},
		{
			Name: "deepseek-v3", Family: "DeepSeek-V3 / V3-0324 (self-hosted)",
			Match:   []Selector{{Model: "*deepseek-v3*"}},
			Earlier: EarlierDropped, TurnRendered: false, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceUser, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "deepseek-v3",
			Source: "intel/ipex-llm llamacpp_portable_zip_gpu_quickstart.md@273f58b1 (a logged GGUF template; secondary): content split at </think>, system joined at the front (RENDERING.md §1, §3)",
		},
		{
			Name: "deepseek-r1", Family: "DeepSeek-R1 and R1-Distill (self-hosted, Jan-2025 template)",
			Match:   []Selector{{Model: "*deepseek-r1*"}},
			Earlier: EarlierDropped, TurnRendered: false, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceUser, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "deepseek-r1",
			Source: "[llama.cpp@c7f460ab] deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja: never reads reasoning_content; the last system message replaces the system prompt (RENDERING.md §1, §3)",
		},
		{
			Name: "qwq", Family: "QwQ-32B",
			Match:   []Selector{{Model: "*qwq*"}},
			Earlier: EarlierDropped, TurnRendered: false, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceSystem, PlaceUser, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "qwq-32b",
			Source: "[llama.cpp@f5cd27b7] Qwen-QwQ-32B.jinja: content split at </think>, no reasoning field rendered; system in place (RENDERING.md §1, §3)",
		},
		{
			Name: "qwen3-coder", Family: "Qwen3-Coder (no reasoning)",
			Match:   []Selector{{Model: "*qwen3-coder*"}},
			Earlier: EarlierDropped, TurnRendered: false, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceSystem, PlaceUser, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "qwen3-coder",
			Source: "[llama.cpp@1920345c] Qwen3-Coder.jinja: no reasoning rendered; system in place (RENDERING.md §3)",
		},
		{
			Name: "qwen3", Family: "Qwen3 hybrid (self-hosted)",
			Match:   []Selector{{Model: "*qwen3*"}},
			Earlier: EarlierDropped, TurnRendered: true, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceSystem, PlaceToolPair, PlaceToolResult},
			ChildToolChoice: "none", Resends: resendsLoop, Template: "qwen3",
			Source: "[llama.cpp@e121edc4] Qwen-Qwen3-0.6B.jinja: reasoning kept after the last user query, dropped before; system in place (RENDERING.md §1, §3, §4.3)",
		},
		{
			Name: "glm-4.7", Family: "GLM-4.7+ (preserved thinking)",
			Match: []Selector{{Model: "*glm-4.7*"}, {Model: "*glm-5*"}, {Upstream: "api.z.ai/api/coding/*"},
				{Upstream: "open.bigmodel.cn/api/coding/*"}},
			Earlier: EarlierKept, TurnRendered: true, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceSystem, PlaceToolPair, PlaceToolResult}, Frozen: true, Resends: resendsSession,
			Source: "[llama.cpp@566059a2] GLM-4.7-Flash.jinja: every turn's reasoning rendered when clear_thinking=false, the Coding Plan default; docs.bigmodel.cn/cn/guide/capabilities/thinking-mode: return the complete, unmodified reasoning, or quality and cache hits suffer (RENDERING.md §1, §2, §4.1)",
		},
		{
			Name: "glm-4.6", Family: "GLM-4.5 / GLM-4.6",
			Match:   []Selector{{Model: "*glm-4.5*"}, {Model: "*glm-4.6*"}},
			Earlier: EarlierDropped, TurnRendered: true, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceSystem, PlaceToolPair, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "glm-4.6",
			Source: "[llama.cpp@1920345c] GLM-4.6.jinja, [llama.cpp@623f3dd0] glm_4_5.jinja: reasoning kept after the last user message (<think></think> before it); system in place (RENDERING.md §1, §3)",
		},
		{
			Name: "kimi-k2-thinking", Family: "Kimi-K2-Thinking",
			Match:   []Selector{{Model: "*kimi-k2-thinking*"}},
			Earlier: EarlierDropped, TurnRendered: true, Boundary: BoundaryFinal,
			Field: "reasoning_content", Notice: []Placement{PlaceToolPair, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "kimi-k2-thinking",
			Prices: Prices{HitPerM: 0.15, MissPerM: 0.60, Note: "lava.so provider docs (secondary; Moonshot's own page not retrieved)"},
			Source: "[llama.cpp@0c3c896e] moonshotai-Kimi-K2-Thinking.jinja: <think></think> for every message up to the last assistant message without tool calls; a system or user notice after a draft blanks the turn's reasoning (RENDERING.md §1, §3, §4.3: synthetic tool pair)",
		},
		{
			Name: "kimi-k2-instruct", Family: "Kimi-K2-Instruct (no reasoning)",
			Match:   []Selector{{Model: "*kimi-k2*"}},
			Earlier: EarlierDropped, TurnRendered: false, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceSystem, PlaceUser, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "kimi-k2-instruct-0711",
			Source: "[llama.cpp@4a4f4269] moonshotai-Kimi-K2.jinja: no reasoning; system in place (RENDERING.md §1, §3)",
		},
		{
			Name: "minimax-m2", Family: "MiniMax-M2",
			Match:   []Selector{{Model: "*minimax-m2*"}},
			Earlier: EarlierDropped, TurnRendered: true, Boundary: BoundaryUser,
			Field: "reasoning_content", Notice: []Placement{PlaceToolPair, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "minimax-m2",
			Prices: Prices{HitPerM: 0.03, MissPerM: 0.30, Note: "M2/M2.1 cache read vs input (LiteLLM docs; secondary); M2.7 $0.06/$0.30 (promptfoo docs; secondary)"},
			Source: "[llama.cpp@1920345c] MiniMax-M2.jinja: reasoning kept after the last user message; a system message after messages[0] is silently dropped (RENDERING.md §1, §3, §4.3: synthetic tool pair); MiniMax-AI/MiniMax-M2 README@2e575efe: pass thinking back in its original format",
		},
		{
			Name: "gpt-oss", Family: "gpt-oss-120b / 20b",
			Match:   []Selector{{Model: "*gpt-oss*"}},
			Earlier: EarlierDropped, TurnRendered: true, Boundary: BoundaryFinal,
			Field: "reasoning", Notice: []Placement{PlaceUser, PlaceToolResult}, ChildToolChoice: "none", Resends: resendsLoop, Template: "gpt-oss-120b",
			Source: "[llama.cpp@b204a5a2] openai-gpt-oss-120b.jinja: analysis dropped once a later final answer exists; system/developer after messages[0] dropped; a synthetic tool pair raises (RENDERING.md §1, §3, §4.3: user)",
		},
	}
}
