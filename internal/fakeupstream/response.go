package fakeupstream

import (
	"net/http"
	"time"

	"github.com/shaperproxy/shaperproxy/fixtures"
)

// Response is one scripted answer. Exactly one of Reply, Exchange, or a raw
// Status/Body should be set; when none is, the Server's default Reply is
// rendered. The stream fields apply to all three.
type Response struct {
	// Reply is rendered as a DeepSeek chat completion, streamed or not
	// following the request's "stream" field.
	Reply *Reply
	// Exchange is replayed verbatim: its status, headers and body. A
	// stream body is written event by event, with a flush after each.
	Exchange *fixtures.Exchange
	// Status, Body and ContentType make a raw answer (an error, say: 400
	// with a DeepSeek-style error JSON, even under application/octet-stream).
	// Status 0 means 200, ContentType "" means application/json. A
	// text/event-stream body is written event by event like an Exchange.
	Status      int
	Body        []byte
	ContentType string

	// EventDelay is the pause before each write after the first.
	EventDelay time.Duration
	// KeepAlives is the number of ": keep-alive\n\n" comments written
	// before the first event of a stream. For a non-stream answer it is
	// the number of empty lines ("\n") written before the body, as
	// DeepSeek does while a request waits.
	KeepAlives int
	// CutAfter, when > 0, drops the connection after this many events
	// (keep-alives not counted): no [DONE], no final chunk, no clean end
	// of the chunked body. A stream with fewer events is dropped after its
	// last one. A non-stream answer is dropped halfway through its body.
	CutAfter int
	// StallAfter and Stall: after StallAfter events (0: before the first,
	// once the headers are out), pause for Stall. Pauses end early when
	// the request's context is cancelled, and the answer is then abandoned.
	// A non-stream answer stalls before its body.
	StallAfter int
	Stall      time.Duration
	// Gzip compresses the body (Content-Encoding: gzip), flushing the
	// compressor after each event.
	Gzip bool
}

// Reply is an assistant turn rendered as DeepSeek renders it.
type Reply struct {
	// Reasoning is the thinking text; Content the answer.
	Reasoning string
	Content   string
	// ToolCalls are streamed after the content, as fragments.
	ToolCalls []ToolCall
	// FinishReason defaults to "tool_calls" when ToolCalls is non-empty,
	// else "stop".
	FinishReason string
	// ReasoningField names the reasoning key; default "reasoning_content"
	// ("reasoning" renders a vLLM/OpenRouter-style reply). It is always
	// present, "" when Reasoning is empty.
	ReasoningField string
	// ChunkChars is the number of characters per streamed delta (default
	// 8). A UTF-8 sequence is never split.
	ChunkChars int
	// Usage overrides the computed usage (prompt_tokens ≈ request bytes/4,
	// completion and reasoning tokens ≈ their text bytes/4).
	Usage *Usage
	// Model overrides the model named in the reply; by default it is the
	// request's "model", or "deepseek-reasoner".
	Model string
}

// ToolCall is one function call of a Reply. An empty ID is replaced by a
// deterministic DeepSeek-style one ("call_00_…").
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// Usage is the token accounting of a Reply, rendered in DeepSeek's shape
// (total_tokens, prompt_tokens_details.cached_tokens,
// completion_tokens_details.reasoning_tokens, prompt_cache_hit_tokens and
// prompt_cache_miss_tokens are derived).
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	ReasoningTokens  int
	CacheHitTokens   int
}

// Recorded is one request as the Server received it.
type Recorded struct {
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
	At       time.Time
}

// ErrorResponse returns a raw answer with a DeepSeek-style error body:
// {"error":{"message":…,"type":"invalid_request_error","param":null,"code":"invalid_request_error"}}.
// Set ContentType on the result to mimic a mislabelled error body.
func ErrorResponse(status int, message string) Response {
	b := append([]byte(`{"error":{"message":`), appendString(nil, message)...)
	b = append(b, `,"type":"invalid_request_error","param":null,"code":"invalid_request_error"}}`...)
	return Response{Status: status, Body: b, ContentType: "application/json"}
}

// defaultReply answers model calls when nothing is scripted.
func defaultReply() Reply {
	return Reply{Reasoning: "The user wants a short answer.", Content: "ok"}
}
