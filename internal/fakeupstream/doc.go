// Package fakeupstream is a scripted DeepSeek-style chat completions
// upstream for tests, `shaperproxy demo` and benchmarks.
//
// A Server answers model calls (any POST other than /embeddings) with the
// Responses pushed onto its queue, in order; a Handle func, when set, is
// asked first. A Response is a Reply rendered exactly as DeepSeek renders a
// chat completion (streamed when the request says "stream": true), a
// recorded fixtures.Exchange replayed byte for byte, or a raw status and
// body. Stream behaviour (delays, keep-alive comments, stalls, a dropped
// connection, gzip) is set per Response. Every request is recorded.
//
//	up := fakeupstream.New()
//	base, stop, err := up.Start("")
//	if err != nil { ... }
//	defer stop()
//	up.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
//		Reasoning: "The user wants a file listed.",
//		ToolCalls: []fakeupstream.ToolCall{{Name: "ls", Arguments: `{"path":"."}`}},
//	}})
//	// POST base+"/chat/completions" ...
//	reqs := up.Requests()
//
// With SetPromptCache, rendered replies report prompt-cache usage as
// DeepSeek does (prompt_cache_hit_tokens and _miss_tokens), by prefix
// matching over the prompts the upstream saw, rendered with the model's
// chat template when one is given (see PromptCache for the approximation).
//
// IDs and timestamps come from a counter, so a run is reproducible: the
// n-th reply of a Server (counting from New or Reset) is always the same
// bytes for the same request. RenderStream and RenderJSON render a Reply
// without a server, as the first reply of a fresh Server would be.
package fakeupstream
