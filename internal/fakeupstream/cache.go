package fakeupstream

import (
	"sync"

	"github.com/shaperproxy/shaperproxy/internal/promptcache"
	"github.com/shaperproxy/shaperproxy/internal/render"
)

// PromptCache makes a Server report prompt-cache usage the way DeepSeek
// does (prompt_cache_hit_tokens, prompt_cache_miss_tokens,
// prompt_tokens_details.cached_tokens), by prefix matching over the
// prompts it has seen: a promptcache.Cache (the approximation is
// described there) fed the prompts as Renderer renders them (the raw
// messages without one), each with the reply as the next request's history
// renders it. Set it with Server.SetPromptCache; it is safe for concurrent
// use.
type PromptCache struct {
	renderer render.Renderer
	cache    *promptcache.Cache

	mu     sync.Mutex
	usages []Usage
}

// NewPromptCache returns a cache whose prompts r renders (nil: the raw
// messages) with units every unit tokens (<= 0: 64).
func NewPromptCache(r render.Renderer, unit int) *PromptCache {
	return &PromptCache{renderer: r, cache: promptcache.New(unit)}
}

// Usages returns the usage of every reply billed so far, in order.
func (c *PromptCache) Usages() []Usage {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Usage(nil), c.usages...)
}

// bill returns the usage of answering req with rp (whose tool calls have
// their ids) and persists the request's units.
func (c *PromptCache) bill(req []byte, rp Reply) Usage {
	u := usageOf(req, rp)
	b := c.cache.Bill(c.renderer, req, replyMessage(rp))
	u.PromptTokens, u.CacheHitTokens = b.Tokens, b.Hit
	c.mu.Lock()
	defer c.mu.Unlock()
	c.usages = append(c.usages, u)
	return u
}

// replyMessage returns rp as the assistant message a client sends back.
func replyMessage(rp Reply) []byte {
	field := rp.ReasoningField
	if field == "" {
		field = "reasoning_content"
	}
	msg := []byte(`{"role":"assistant","content":`)
	msg = appendString(msg, rp.Content)
	msg = append(append(append(msg, ','), appendString(nil, field)...), ':')
	msg = appendString(msg, rp.Reasoning)
	if len(rp.ToolCalls) > 0 {
		msg = append(msg, `,"tool_calls":[`...)
		for i, tc := range rp.ToolCalls {
			if i > 0 {
				msg = append(msg, ',')
			}
			msg = append(appendString(append(msg, `{"id":`...), tc.ID), `,"type":"function","function":{"name":`...)
			msg = append(appendString(msg, tc.Name), `,"arguments":`...)
			msg = append(appendString(msg, tc.Arguments), "}}"...)
		}
		msg = append(msg, ']')
	}
	return append(msg, '}')
}
