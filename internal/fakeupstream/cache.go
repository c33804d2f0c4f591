package fakeupstream

import (
	"strings"
	"sync"

	"github.com/shaperproxy/shaperproxy/internal/render"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// PromptCache makes a Server report prompt-cache usage the way DeepSeek
// does (prompt_cache_hit_tokens, prompt_cache_miss_tokens,
// prompt_tokens_details.cached_tokens), by prefix matching over the
// prompts it has seen. Set it with Server.SetPromptCache; it is safe for
// concurrent use.
//
// The approximation, and what it follows of DeepSeek's documented rules
// (api-docs.deepseek.com guides/kv_cache, RENDERING.md §2):
//
//   - The prompt is the request as the upstream renders it: through
//     Renderer (a chat template or the V4 encoder, package render) when
//     one is set, else the raw JSON of the tools and of each message,
//     one per line.
//   - Tokens are estimated as a quarter of the bytes, rounded up; the
//     prompt's tokens are its prompt_tokens.
//   - Cache units are persisted at the end of each prompt ("the end
//     position of the user input"), at the end of each prompt followed by
//     the reply as it will be rendered in the next request's history ("the
//     end position of the model output"), and every Unit tokens along both
//     ("at fixed token intervals"; DeepSeek's interval is not published,
//     its older rule was 64 tokens).
//   - A request hits the longest persisted unit that is a whole prefix of
//     its prompt: a stored prompt it extends counts in full, any other
//     earlier prompt up to the last whole Unit before the first byte where
//     they differ. Everything after is a miss.
//   - Nothing expires (DeepSeek clears units within hours to days).
type PromptCache struct {
	renderer render.Renderer
	unit     int // tokens
	max      int

	mu      sync.Mutex
	entries []string
	usages  []Usage
}

// NewPromptCache returns a cache whose prompts r renders (nil: the raw
// messages) with units every unit tokens (<= 0: 64).
func NewPromptCache(r render.Renderer, unit int) *PromptCache {
	if unit <= 0 {
		unit = 64
	}
	return &PromptCache{renderer: r, unit: unit, max: 1024}
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
	prompt := c.prompt(req, false)
	u := usageOf(req, rp)
	u.PromptTokens = tokens(prompt)
	c.mu.Lock()
	defer c.mu.Unlock()
	u.CacheHitTokens = min(c.hit(prompt), u.PromptTokens)
	c.add(prompt)
	if out := c.prompt(withReply(req, rp), true); strings.HasPrefix(out, prompt) || c.renderer == nil {
		c.add(out)
	}
	c.usages = append(c.usages, u)
	return u
}

// hit returns the cached tokens of prompt. c.mu is held.
func (c *PromptCache) hit(prompt string) int {
	best := 0
	for _, e := range c.entries {
		if strings.HasPrefix(prompt, e) {
			best = max(best, tokens(e))
			continue
		}
		n := commonPrefix(e, prompt) / 4 // whole tokens before the first difference
		best = max(best, n/c.unit*c.unit)
	}
	return best
}

// add persists a prompt, forgetting the oldest beyond max. c.mu is held.
func (c *PromptCache) add(p string) {
	c.entries = append(c.entries, p)
	if len(c.entries) > c.max {
		c.entries = c.entries[1:]
	}
}

// prompt renders req; history renders it as a finished conversation
// (no generation prompt). A request the renderer refuses falls back to
// the raw messages.
func (c *PromptCache) prompt(req []byte, history bool) string {
	if c.renderer != nil {
		if p, err := c.renderer.Render(req, render.Options{NoGenerationPrompt: history}); err == nil {
			return p
		}
	}
	var b strings.Builder
	if t := gjson.GetBytes(req, "tools"); t.Exists() {
		b.WriteString(t.Raw)
		b.WriteByte('\n')
	}
	for _, m := range gjson.GetBytes(req, "messages").Array() {
		b.WriteString(m.Raw)
		b.WriteByte('\n')
	}
	return b.String()
}

// withReply returns req with rp appended as the assistant message a
// client sends back.
func withReply(req []byte, rp Reply) []byte {
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
	msg = append(msg, '}')
	out, err := sjson.SetRawBytes(req, "messages.-1", msg)
	if err != nil {
		return req
	}
	return out
}

func commonPrefix(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
