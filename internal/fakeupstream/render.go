package fakeupstream

import (
	"fmt"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/internal/promptcache"
	"github.com/tidwall/gjson"
)

const (
	// baseCreated is the "created" of reply 0; reply n has baseCreated+n.
	baseCreated = 1764664568
	// fingerprint is the system_fingerprint of every reply.
	fingerprint = "fp_fakeupstream_prod0820_fp8_kvcache"
	// defaultModel names the model when neither Reply nor request does.
	defaultModel = "deepseek-reasoner"
	// defaultChunkChars is Reply.ChunkChars' default.
	defaultChunkChars = 8
)

// RenderStream renders rp as the SSE body DeepSeek would stream for the
// request reqBody (whose "model" and stream_options.include_usage it
// follows), ending with "data: [DONE]\n\n". It is what a fresh Server
// sends for its first reply.
func RenderStream(reqBody []byte, rp Reply) []byte {
	var b []byte
	for _, ev := range streamEvents(reqBody, rp, 1) {
		b = append(b, ev...)
	}
	return b
}

// RenderJSON renders rp as a non-streamed chat.completion body, as a fresh
// Server sends it for its first reply to a request without a "model".
func RenderJSON(rp Reply) []byte {
	return completionJSON(nil, rp, 1)
}

// turn is a Reply prepared for rendering: defaults applied, request facts
// and the reply's sequence number resolved.
type turn struct {
	Reply
	id, model    string
	created      int64
	includeUsage bool
	usage        Usage
}

func newTurn(req []byte, rp Reply, seq int64) turn {
	t := turn{Reply: rp, id: chatID(seq), created: baseCreated + seq, model: rp.Model}
	if t.model == "" {
		t.model = gjson.GetBytes(req, "model").String()
	}
	if t.model == "" {
		t.model = defaultModel
	}
	if t.ReasoningField == "" {
		t.ReasoningField = "reasoning_content"
	}
	if t.ChunkChars <= 0 {
		t.ChunkChars = defaultChunkChars
	}
	if t.FinishReason == "" {
		t.FinishReason = finishReason(rp)
	}
	t.ToolCalls = withIDs(rp.ToolCalls, seq)
	t.includeUsage = gjson.GetBytes(req, "stream_options.include_usage").Bool()
	t.usage = usageOf(req, rp)
	return t
}

func finishReason(rp Reply) string {
	if len(rp.ToolCalls) > 0 {
		return "tool_calls"
	}
	return "stop"
}

// chatID is a UUID-shaped id, like DeepSeek's, made from seq.
func chatID(seq int64) string {
	return fmt.Sprintf("00000000-0000-4000-8000-%012x", seq)
}

// withIDs returns a copy of calls with deterministic ids where none is set.
func withIDs(calls []ToolCall, seq int64) []ToolCall {
	out := make([]ToolCall, len(calls))
	for i, c := range calls {
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%02d_fake%020d", i, seq)
		}
		out[i] = c
	}
	return out
}

// usageOf returns rp.Usage or an estimate from the byte lengths.
func usageOf(req []byte, rp Reply) Usage {
	if rp.Usage != nil {
		return *rp.Usage
	}
	u := Usage{PromptTokens: max(1, len(req)/4), ReasoningTokens: tokens(rp.Reasoning)}
	u.CompletionTokens = u.ReasoningTokens + tokens(rp.Content)
	for _, c := range rp.ToolCalls {
		u.CompletionTokens += tokens(c.Name) + tokens(c.Arguments)
	}
	u.CompletionTokens = max(1, u.CompletionTokens)
	return u
}

// tokens estimates the token count of s as the prompt cache does.
func tokens(s string) int { return promptcache.Tokens(s) }

// streamEvents renders the SSE events of a streamed reply, [DONE] included.
func streamEvents(req []byte, rp Reply, seq int64) [][]byte {
	t := newTurn(req, rp, seq)
	evs := [][]byte{t.chunk(t.firstDelta(), "", false)}
	for _, p := range pieces(t.Reasoning, t.ChunkChars) {
		evs = append(evs, t.chunk(t.textDelta(nil, &p), "", false))
	}
	for _, p := range pieces(t.Content, t.ChunkChars) {
		evs = append(evs, t.chunk(t.textDelta(&p, nil), "", false))
	}
	for i, c := range t.ToolCalls {
		evs = append(evs, t.chunk(toolHeadDelta(i, c), "", false))
		for _, p := range pieces(c.Arguments, t.ChunkChars) {
			evs = append(evs, t.chunk(toolArgsDelta(i, p), "", false))
		}
	}
	empty := ""
	evs = append(evs, t.chunk(t.textDelta(&empty, nil), t.FinishReason, true))
	return append(evs, []byte("data: [DONE]\n\n"))
}

// chunk renders one chat.completion.chunk event. final adds the finish
// reason and, when the request asked for it, the usage.
func (t turn) chunk(delta []byte, finish string, final bool) []byte {
	b := append([]byte(`data: {"id":"`), t.id...)
	b = append(b, `","object":"chat.completion.chunk","created":`...)
	b = fmt.Appendf(b, "%d", t.created)
	b = append(append(b, `,"model":`...), appendString(nil, t.model)...)
	b = append(b, `,"system_fingerprint":"`+fingerprint+`","choices":[{"index":0,"delta":`...)
	b = append(append(b, delta...), `,"logprobs":null,"finish_reason":`...)
	b = appendNullableString(b, finish, final)
	b = append(b, "}]"...)
	if t.includeUsage {
		b = append(b, `,"usage":`...)
		if final {
			b = appendUsage(b, t.usage)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, "}\n\n"...)
}

// firstDelta is {"role":"assistant","content":null,"<field>":""}.
func (t turn) firstDelta() []byte {
	b := append([]byte(`{"role":"assistant","content":null,`), appendString(nil, t.ReasoningField)...)
	return append(b, `:""}`...)
}

// textDelta is {"content":…,"<field>":…} with nil rendered as null.
func (t turn) textDelta(content, reasoning *string) []byte {
	b := append([]byte(`{"content":`), appendStringPtr(nil, content)...)
	b = append(append(b, ','), appendString(nil, t.ReasoningField)...)
	b = append(append(b, ':'), appendStringPtr(nil, reasoning)...)
	return append(b, '}')
}

// toolHeadDelta is the first fragment of a tool call: index, id, type,
// function name and empty arguments.
func toolHeadDelta(i int, c ToolCall) []byte {
	b := fmt.Appendf(nil, `{"tool_calls":[{"index":%d,"id":`, i)
	b = append(appendString(b, c.ID), `,"type":"function","function":{"name":`...)
	b = append(appendString(b, c.Name), `,"arguments":""}}]}`...)
	return b
}

// toolArgsDelta is a later fragment: index and an arguments piece.
func toolArgsDelta(i int, piece string) []byte {
	b := fmt.Appendf(nil, `{"tool_calls":[{"index":%d,"function":{"arguments":`, i)
	return append(appendString(b, piece), "}}]}"...)
}

// completionJSON renders a non-streamed chat.completion body.
func completionJSON(req []byte, rp Reply, seq int64) []byte {
	t := newTurn(req, rp, seq)
	b := append([]byte(`{"id":"`), t.id...)
	b = append(b, `","object":"chat.completion","created":`...)
	b = fmt.Appendf(b, "%d", t.created)
	b = append(append(b, `,"model":`...), appendString(nil, t.model)...)
	b = append(b, `,"choices":[{"index":0,"message":{"role":"assistant","content":`...)
	b = append(appendString(b, t.Content), ',')
	b = append(appendString(b, t.ReasoningField), ':')
	b = appendString(b, t.Reasoning)
	if len(t.ToolCalls) > 0 {
		b = appendToolCalls(append(b, `,"tool_calls":`...), t.ToolCalls)
	}
	b = append(b, `},"logprobs":null,"finish_reason":`...)
	b = append(appendString(b, t.FinishReason), `}],"usage":`...)
	b = appendUsage(b, t.usage)
	return append(b, `,"system_fingerprint":"`+fingerprint+`"}`...)
}

// appendToolCalls appends the message.tool_calls array of a completion.
func appendToolCalls(b []byte, calls []ToolCall) []byte {
	b = append(b, '[')
	for i, c := range calls {
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"index":%d,"id":`, i)
		b = append(appendString(b, c.ID), `,"type":"function","function":{"name":`...)
		b = append(appendString(b, c.Name), `,"arguments":`...)
		b = append(appendString(b, c.Arguments), "}}"...)
	}
	return append(b, ']')
}

// appendUsage appends u in DeepSeek's usage shape.
func appendUsage(b []byte, u Usage) []byte {
	return fmt.Appendf(b, `{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,`+
		`"prompt_tokens_details":{"cached_tokens":%d},"completion_tokens_details":{"reasoning_tokens":%d},`+
		`"prompt_cache_hit_tokens":%d,"prompt_cache_miss_tokens":%d}`,
		u.PromptTokens, u.CompletionTokens, u.PromptTokens+u.CompletionTokens,
		u.CacheHitTokens, u.ReasoningTokens, u.CacheHitTokens, u.PromptTokens-u.CacheHitTokens)
}

// pieces splits s into pieces of at most n characters, never inside a
// UTF-8 sequence. An empty s has no pieces.
func pieces(s string, n int) []string {
	var out []string
	for len(s) > 0 {
		end, count := 0, 0
		for end < len(s) && count < n {
			_, size := utf8.DecodeRuneInString(s[end:])
			end += size
			count++
		}
		out = append(out, s[:end])
		s = s[end:]
	}
	return out
}
