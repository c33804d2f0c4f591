package accounting

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Shape names the form a usage object came in.
type Shape string

// The usage shapes Parse knows.
const (
	// ShapeDeepSeek: prompt_tokens with prompt_cache_hit_tokens and
	// prompt_cache_miss_tokens (DeepSeek's API).
	ShapeDeepSeek Shape = "deepseek"
	// ShapeOpenAI: prompt_tokens with prompt_tokens_details.cached_tokens
	// (OpenAI chat completions, OpenRouter, vLLM, most compatible servers).
	ShapeOpenAI Shape = "openai"
	// ShapeAnthropic: input_tokens (what neither hit nor wrote the cache),
	// cache_read_input_tokens and cache_creation_input_tokens (Messages).
	ShapeAnthropic Shape = "anthropic"
	// ShapeResponses: input_tokens with input_tokens_details.cached_tokens
	// (OpenAI Responses).
	ShapeResponses Shape = "responses"
)

// Usage is what an upstream reported for one call, whatever its shape.
// Prompt = Hit + Miss; CacheWrite is the part of Miss that was written to
// the cache (Anthropic bills it above an ordinary miss; the profiles do
// not know that price, so it is priced as a miss). The zero Usage is an
// empty sum.
type Usage struct {
	Prompt     int64 // prompt (input) tokens billed
	Hit        int64 // of Prompt, served from the prompt cache
	Miss       int64 // of Prompt, not served from the cache
	CacheWrite int64 // of Miss, written to the cache (Anthropic)
	Output     int64 // completion (output) tokens, reasoning included
	Reasoning  int64 // of Output, reasoning tokens (when reported)
	// CacheReported counts the usages that said how many prompt tokens
	// hit the cache (a usage without it counts its prompt as misses).
	CacheReported int64
	// Cost is what the upstream itself said the call cost, in US dollars
	// (OpenRouter's "cost"); CostReported counts the usages that said it.
	Cost         float64
	CostReported int64
}

// Parse normalises a usage object as an upstream wrote it (the value of
// "usage" in a chat chunk or body, of "message.usage" or "usage" in an
// Anthropic stream, of "response.usage" in a Responses stream). ok is
// false when raw is not an object with token counts.
//
// A count or cost the upstream wrote below zero is taken as zero: the
// sums must never go down (and a Prometheus counter panics on a negative
// Add).
func Parse(raw []byte) (u Usage, shape Shape, ok bool) {
	u, shape, ok = parse(raw)
	return u.nonNegative(), shape, ok
}

// nonNegative returns u with every field below zero set to zero.
func (u Usage) nonNegative() Usage {
	for _, p := range []*int64{&u.Prompt, &u.Hit, &u.Miss, &u.CacheWrite, &u.Output, &u.Reasoning} {
		*p = max(*p, 0)
	}
	if !(u.Cost >= 0) { // NaN too
		u.Cost = 0
	}
	return u
}

func parse(raw []byte) (Usage, Shape, bool) {
	root := gjson.ParseBytes(raw)
	if !root.IsObject() {
		return Usage{}, "", false
	}
	var m members // on the stack: the shapes only read it
	m.read(root)
	f := &m
	switch {
	case f.Get("prompt_cache_hit_tokens").Exists() || f.Get("prompt_cache_miss_tokens").Exists():
		return deepseek(f), ShapeDeepSeek, true
	case f.Get("prompt_tokens").Exists() || f.Get("completion_tokens").Exists():
		return openai(f), ShapeOpenAI, true
	case f.Get("input_tokens_details").Exists() || f.Get("output_tokens_details").Exists():
		return responses(f), ShapeResponses, true
	case f.Get("input_tokens").Exists() || f.Get("output_tokens").Exists() ||
		f.Get("cache_read_input_tokens").Exists():
		return anthropic(f), ShapeAnthropic, true
	}
	return Usage{}, "", false
}

// deepseek reads prompt_cache_hit_tokens and prompt_cache_miss_tokens;
// a missing one is what prompt_tokens leaves.
func deepseek(f *members) Usage {
	hit, miss := f.Get("prompt_cache_hit_tokens"), f.Get("prompt_cache_miss_tokens")
	u := Usage{Prompt: f.Get("prompt_tokens").Int(), Hit: hit.Int(), Miss: miss.Int(), CacheReported: 1}
	switch {
	case !hit.Exists():
		u.Hit = max(u.Prompt-u.Miss, 0)
	case !miss.Exists():
		u.Miss = max(u.Prompt-u.Hit, 0)
	}
	u.Prompt = u.Hit + u.Miss
	return u.withOutput(f, "completion_tokens", "completion_tokens_details.reasoning_tokens")
}

// openai reads prompt_tokens and prompt_tokens_details.cached_tokens
// (with OpenRouter's cost when present).
func openai(f *members) Usage {
	cached := f.Get("prompt_tokens_details.cached_tokens")
	u := split(f.Get("prompt_tokens").Int(), cached)
	u.CacheWrite = min(f.Get("prompt_tokens_details.cache_write_tokens").Int(), u.Miss)
	if c := f.Get("cost"); c.Type == gjson.Number {
		u.Cost, u.CostReported = c.Float(), 1
	}
	return u.withOutput(f, "completion_tokens", "completion_tokens_details.reasoning_tokens")
}

// responses reads input_tokens and input_tokens_details.cached_tokens.
func responses(f *members) Usage {
	u := split(f.Get("input_tokens").Int(), f.Get("input_tokens_details.cached_tokens"))
	return u.withOutput(f, "output_tokens", "output_tokens_details.reasoning_tokens")
}

// anthropic reads input_tokens, which counts only what neither hit nor
// wrote the cache, and adds the cache reads and writes to it.
func anthropic(f *members) Usage {
	read, write := f.Get("cache_read_input_tokens"), f.Get("cache_creation_input_tokens")
	u := Usage{Hit: read.Int(), CacheWrite: write.Int()}
	u.Miss = f.Get("input_tokens").Int() + u.CacheWrite
	u.Prompt = u.Hit + u.Miss
	if read.Exists() || write.Exists() {
		u.CacheReported = 1
	}
	return u.withOutput(f, "output_tokens", "")
}

// split divides prompt tokens by the cached count, when there is one.
func split(prompt int64, cached gjson.Result) Usage {
	u := Usage{Prompt: prompt, Hit: min(max(cached.Int(), 0), prompt)}
	u.Miss = prompt - u.Hit
	if cached.Exists() {
		u.CacheReported = 1
	}
	return u
}

func (u Usage) withOutput(f *members, output, reasoning string) Usage {
	u.Output = f.Get(output).Int()
	if reasoning != "" {
		u.Reasoning = f.Get(reasoning).Int()
	}
	return u
}

// Add adds v to u.
func (u *Usage) Add(v Usage) {
	u.Prompt += v.Prompt
	u.Hit += v.Hit
	u.Miss += v.Miss
	u.CacheWrite += v.CacheWrite
	u.Output += v.Output
	u.Reasoning += v.Reasoning
	u.CacheReported += v.CacheReported
	u.Cost += v.Cost
	u.CostReported += v.CostReported
}

// HitRatio returns Hit/Prompt, 0 for no prompt tokens.
func (u Usage) HitRatio() float64 {
	if u.Prompt <= 0 {
		return 0
	}
	return float64(u.Hit) / float64(u.Prompt)
}

// Kind is the kind of call a capture record or a proxy call is: "primary"
// for the client's own call, else the internal call's purpose
// ("review-child", "review-continuation", "deliberate-branch",
// "deliberate-continuation"; "internal" when it has none, as in logs
// written before purposes were recorded).
func Kind(internal bool, purpose string) string {
	switch {
	case !internal:
		return KindPrimary
	case purpose == "":
		return KindInternal
	}
	return purpose
}

// The kinds that are no purpose.
const (
	KindPrimary  = "primary"
	KindInternal = "internal"
)

// members are the top-level members of a usage object, read in one pass:
// the shapes ask for up to a dozen keys, and a gjson lookup per key
// scanned the object each time (a usage is read at the end of every call).
type members struct {
	keys [maxMembers]string
	vals [maxMembers]gjson.Result
	n    int
	all  gjson.Result // looked up directly when it has more members than kept
	over bool
}

const maxMembers = 16

func (m *members) read(obj gjson.Result) {
	m.all = obj
	obj.ForEach(func(k, v gjson.Result) bool {
		if m.n == maxMembers {
			m.over = true
			return false
		}
		m.keys[m.n], m.vals[m.n] = k.Str, v
		m.n++
		return true
	})
}

// Get returns the value at a path of plain keys ("a" or "a.b"), as
// gjson's Get does (the first of repeated keys).
func (m *members) Get(path string) gjson.Result {
	if m.over {
		return m.all.Get(path)
	}
	head, rest, nested := strings.Cut(path, ".")
	for i := range m.n {
		if m.keys[i] == head {
			if !nested {
				return m.vals[i]
			}
			if v := m.vals[i].Get(rest); v.Exists() {
				return v
			}
			return m.all.Get(path) // a repeated key: gjson looks on in the later ones
		}
	}
	return gjson.Result{}
}
