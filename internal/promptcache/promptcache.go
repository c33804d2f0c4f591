// Package promptcache simulates an upstream's prompt cache the way
// DeepSeek documents its own (api-docs.deepseek.com guides/kv_cache,
// RENDERING.md §2): prefix matching over the prompts the upstream renders.
// The fake upstream bills its replies with it, and `shaperproxy capture
// cost` replays captured traffic through it.
//
// The approximation:
//
//   - The prompt is the request as the upstream renders it: through a
//     render.Renderer (a chat template or the V4 encoder) when one is
//     given, else the raw JSON of the tools and of each message, one per
//     line (Prompt).
//   - Tokens are estimated as a quarter of the bytes, rounded up (Tokens).
//   - Cache units are persisted at the end of each prompt ("the end
//     position of the user input"), at the end of each prompt followed by
//     the reply as it will be rendered in the next request's history ("the
//     end position of the model output"), and every Unit tokens along both
//     ("at fixed token intervals"; DeepSeek's interval is not published,
//     its older rule was 64 tokens).
//   - A request hits the longest persisted unit that is a whole prefix of
//     its prompt: a persisted prompt it extends counts in full, any other
//     up to the last whole unit before the first byte where they differ.
//     Everything after is a miss.
//   - Nothing expires (DeepSeek clears units within hours to days).
//
// Prompts are not kept: a Cache stores 64-bit hashes of the prefixes that
// end at each unit boundary and at each persisted end, so a week of agent
// traffic (hundreds of megabytes of prompts) costs a few bytes per unit,
// and a lookup reads the prompt once.
package promptcache

import (
	"hash/maphash"
	"strings"
	"sync"

	"github.com/shaperproxy/shaperproxy/internal/render"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// DefaultUnit is the cache unit in tokens when none is given.
const DefaultUnit = 64

// Cache is a simulated prefix prompt cache. It is safe for concurrent
// use; the zero value is not: use New.
type Cache struct {
	unit int // tokens
	seed maphash.Seed

	mu     sync.Mutex
	bounds map[uint64]bool        // chain hashes at unit boundaries
	ends   map[uint64][]persisted // by the chain hash of the last boundary before the end
}

// persisted is one persisted end: its length and the hash of the prefix.
type persisted struct {
	n    int
	hash uint64
}

// New returns an empty cache with units every unit tokens (<= 0:
// DefaultUnit).
func New(unit int) *Cache {
	if unit <= 0 {
		unit = DefaultUnit
	}
	return &Cache{unit: unit, seed: maphash.MakeSeed(), bounds: map[uint64]bool{}, ends: map[uint64][]persisted{}}
}

// Tokens estimates the tokens of s: a quarter of its bytes, rounded up.
func Tokens(s string) int { return (len(s) + 3) / 4 }

// Bill is what one request was billed.
type Bill struct {
	Prompt string // the prompt as rendered
	Tokens int    // its tokens
	Hit    int    // of them, served from the cache
}

// Bill renders req with r (nil: the raw messages), returns what the cache
// holds of its prompt, and persists the prompt and, when reply (an
// assistant message as a JSON object) is not nil, the prompt followed by
// the reply as the next request's history renders it (only when that
// extends the prompt, or without a renderer).
func (c *Cache) Bill(r render.Renderer, req, reply []byte) Bill {
	prompt := Prompt(r, req, false)
	b := Bill{Prompt: prompt, Tokens: Tokens(prompt)}
	var out string
	if reply != nil {
		if out = Prompt(r, WithMessage(req, reply), true); !strings.HasPrefix(out, prompt) && r != nil {
			out = ""
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	b.Hit = min(c.hit(prompt), b.Tokens)
	c.add(prompt)
	if out != "" {
		c.add(out)
	}
	return b
}

// Hit returns the cached tokens of prompt.
func (c *Cache) Hit(prompt string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hit(prompt)
}

// Add persists prompt: its end and every unit boundary along it.
func (c *Cache) Add(prompt string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.add(prompt)
}

// unitBytes is a unit in bytes (tokens are a quarter of the bytes).
func (c *Cache) unitBytes() int { return 4 * c.unit }

// chain returns the hashes of p's prefixes that end at unit boundaries:
// chain[k] covers p[:k*unitBytes]; chain[0] is the empty prefix's.
func (c *Cache) chain(p string) []uint64 {
	ub := c.unitBytes()
	out := make([]uint64, 1, len(p)/ub+1)
	for k := 1; k*ub <= len(p); k++ {
		out = append(out, c.link(out[k-1], p[(k-1)*ub:k*ub]))
	}
	return out
}

// link hashes a prefix from the hash of the prefix before it and the
// bytes after.
func (c *Cache) link(prev uint64, s string) uint64 {
	return maphash.Comparable(c.seed, [2]uint64{prev, maphash.String(c.seed, s)})
}

// endHash hashes p[:n] given p's chain.
func (c *Cache) endHash(ch []uint64, p string, n int) uint64 {
	k := n / c.unitBytes()
	return maphash.Comparable(c.seed, [3]uint64{ch[k], maphash.String(c.seed, p[k*c.unitBytes():n]), uint64(n)})
}

func (c *Cache) add(p string) {
	ch := c.chain(p)
	for _, h := range ch[1:] {
		c.bounds[h] = true
	}
	k := len(p) / c.unitBytes()
	e := persisted{n: len(p), hash: c.endHash(ch, p, len(p))}
	for _, x := range c.ends[ch[k]] {
		if x == e {
			return
		}
	}
	c.ends[ch[k]] = append(c.ends[ch[k]], e)
}

// hit returns the tokens of the longest persisted prefix of p: a whole
// persisted prompt, or p up to the last unit boundary it shares with one.
// c.mu is held.
func (c *Cache) hit(p string) int {
	ch := c.chain(p)
	k := 0 // the last boundary p shares with a persisted prompt
	for k+1 < len(ch) && c.bounds[ch[k+1]] {
		k++
	}
	best := k * c.unit
	// A persisted end can beat that only if it lies past boundary k (one
	// before it is at most k units long), so only the ends in k's bucket
	// are compared.
	for _, e := range c.ends[ch[k]] {
		if e.n <= len(p) && Tokens(p[:e.n]) > best && c.endHash(ch, p, e.n) == e.hash {
			best = Tokens(p[:e.n])
		}
	}
	return best
}

// Prompt renders req with r; history renders it as a finished
// conversation (no generation prompt). Without a renderer, or for a
// request r refuses, it is the raw JSON of the tools and of each message,
// one per line.
func Prompt(r render.Renderer, req []byte, history bool) string {
	if r != nil {
		if p, err := r.Render(req, render.Options{NoGenerationPrompt: history}); err == nil {
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

// WithMessage returns req with msg (a JSON object) appended to its
// messages; req itself when that fails.
func WithMessage(req, msg []byte) []byte {
	out, err := sjson.SetRawBytes(req, "messages.-1", msg)
	if err != nil {
		return req
	}
	return out
}
