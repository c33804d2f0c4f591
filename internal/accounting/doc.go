// Package accounting turns the token accounting upstreams report into one
// form, and counts it.
//
// Every provider reports usage its own way: DeepSeek's
// prompt_cache_hit_tokens and prompt_cache_miss_tokens, OpenAI's (and
// OpenRouter's, vLLM's) prompt_tokens_details.cached_tokens, Anthropic's
// input_tokens beside cache_read_input_tokens and
// cache_creation_input_tokens, the Responses API's input_tokens_details;
// reasoning tokens under completion_tokens_details or
// output_tokens_details. In a stream the usage comes inline with the
// finish, in a chunk of its own with "choices": [], or split over
// Anthropic's message_start and message_delta. The proxy finds the usage
// object in each response as it passes (conv.UsageWatcher, once for all
// observers) and hands it over with the call's end (proxy.End.Usage).
// Parse normalises one usage object (a pure function); Price prices a sum
// with a rendering profile's prices:
//
//	u, shape, ok := accounting.Parse(end.Usage)
//	cost := accounting.Price(profiles.ForRoute(route, model).Prices, u)
//
// A Meter is the proxy observer that counts the usages per route, model
// (a bounded set of labels) and kind of call (the client's own, or the
// proxy's review and deliberate calls) in /metrics. The capture log keeps
// each call's usage too; `shaperproxy capture stats` sums it per
// conversation as well.
package accounting
