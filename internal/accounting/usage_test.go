package accounting

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// watch runs a recorded response through the proxy's usage watcher as
// the proxy hands it over: event by event, or a body in pieces of n bytes.
func watch(t *testing.T, body []byte, stream bool, n int) *conv.UsageWatcher {
	t.Helper()
	w := &conv.UsageWatcher{}
	if !stream {
		for len(body) > 0 {
			k := min(n, len(body))
			w.Body(body[:k])
			body = body[k:]
		}
		return w
	}
	r := sse.NewReader(bytes.NewReader(body))
	for {
		ev, err := r.Next()
		if errors.Is(err, io.EOF) {
			return w
		}
		if err != nil {
			t.Fatal(err)
		}
		if ev.HasData {
			w.Event(ev.Data)
		}
	}
}

// TestParseFixtures normalises the usage of every recorded exchange in
// fixtures/providers, found as the proxy finds it (stream events or the
// body in pieces), against the numbers in the recordings.
func TestParseFixtures(t *testing.T) {
	want := map[string]struct {
		shape Shape
		u     Usage
	}{
		// Anthropic: message_start's usage completed by message_delta's.
		"anthropic_redacted-thinking_stream_raw-sse.pydantic-ai.vcr.yaml#0":             {ShapeAnthropic, Usage{Prompt: 92, Miss: 92, Output: 189, CacheReported: 1}},
		"anthropic_sonnet-4-5_thinking-stream_signature-delta.vercel-ai.chunks.jsonl#0": {ShapeAnthropic, Usage{Prompt: 69, Miss: 69, Output: 53, CacheReported: 1}},
		"anthropic_tool-use-with-thinking_multiturn.pydantic-ai.vcr.yaml#0":             {ShapeAnthropic, Usage{Prompt: 398, Miss: 398, Output: 155, CacheReported: 1}},
		"anthropic_tool-use-with-thinking_multiturn.pydantic-ai.vcr.yaml#1":             {ShapeAnthropic, Usage{Prompt: 566, Miss: 566, Output: 126, CacheReported: 1}},
		// DeepSeek: hit and miss keys, reasoning tokens; usage inline with the finish.
		"deepseek-reasoner_stream_raw-sse.pydantic-ai.vcr.yaml#0":                         {ShapeDeepSeek, Usage{Prompt: 6, Miss: 6, Output: 212, Reasoning: 198, CacheReported: 1}},
		"deepseek-reasoner_tool-call_nonstream.vercel-ai.json#0":                          {ShapeDeepSeek, Usage{Prompt: 339, Hit: 320, Miss: 19, Output: 92, Reasoning: 48, CacheReported: 1}},
		"deepseek-reasoner_tool-call_stream.vercel-ai.chunks.jsonl#0":                     {ShapeDeepSeek, Usage{Prompt: 339, Hit: 320, Miss: 19, Output: 83, Reasoning: 39, CacheReported: 1}},
		"deepseek-v4-flash_tool-loop_reasoning-passback_multiturn.pydantic-ai.vcr.yaml#0": {ShapeDeepSeek, Usage{Prompt: 563, Hit: 512, Miss: 51, Output: 116, Reasoning: 60, CacheReported: 1}},
		"deepseek-v4-flash_tool-loop_reasoning-passback_multiturn.pydantic-ai.vcr.yaml#1": {ShapeDeepSeek, Usage{Prompt: 875, Miss: 875, Output: 79, Reasoning: 26, CacheReported: 1}},
		"deepseek-v4-flash_tool-loop_reasoning-passback_multiturn.pydantic-ai.vcr.yaml#2": {ShapeDeepSeek, Usage{Prompt: 976, Hit: 896, Miss: 80, Output: 61, Reasoning: 25, CacheReported: 1}},
		// OpenAI Responses: response.usage of response.completed.
		"openai-responses_gpt-5.1-codex-max_encrypted-content_stream.vercel-ai.chunks.jsonl#0": {ShapeResponses, Usage{Prompt: 134, Miss: 134, Output: 28, CacheReported: 1}},
		"openai-responses_gpt-5.1-codex-max_encrypted-content_stream.vercel-ai.chunks.jsonl#3": {ShapeResponses, Usage{Prompt: 299, Miss: 299, Output: 12, CacheReported: 1}},
		// OpenRouter: OpenAI's shape in a usage chunk, with its own cost.
		"openrouter_o3_stream_raw-sse_reasoning-details-encrypted.pydantic-ai.vcr.yaml#0": {ShapeOpenAI, Usage{Prompt: 9, Miss: 9, Output: 104, CacheReported: 1, Cost: 0.00085, CostReported: 1}},
	}
	exs, err := fixtures.All()
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, ex := range exs {
		w, ok := want[ex.Name]
		if !ok {
			continue
		}
		seen++
		for _, piece := range []int{1 << 20, 7} {
			raw := watch(t, ex.ResponseBody, ex.Stream, piece).Raw()
			got, shape, ok := Parse(raw)
			if !ok || shape != w.shape || got != w.u {
				t.Errorf("%s (pieces of %d): Parse(%s) = %+v, %s, %v; want %+v, %s", ex.Name, piece, raw, got, shape, ok, w.u, w.shape)
			}
		}
	}
	if seen != len(want) {
		t.Errorf("%d of the %d expected exchanges are in the fixtures", seen, len(want))
	}
}

// TestParseShapes covers the shapes and edge cases the fixtures lack.
func TestParseShapes(t *testing.T) {
	tests := []struct {
		name, raw string
		shape     Shape
		want      Usage
		ok        bool
	}{
		{"openai cached", `{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_tokens_details":{"cached_tokens":64},"completion_tokens_details":{"reasoning_tokens":12}}`,
			ShapeOpenAI, Usage{Prompt: 100, Hit: 64, Miss: 36, Output: 20, Reasoning: 12, CacheReported: 1}, true},
		{"openai without cache details (vLLM)", `{"prompt_tokens":50,"completion_tokens":5,"total_tokens":55}`,
			ShapeOpenAI, Usage{Prompt: 50, Miss: 50, Output: 5}, true},
		{"openrouter cache write", `{"prompt_tokens":100,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":0,"cache_write_tokens":80},"cost":0.5}`,
			ShapeOpenAI, Usage{Prompt: 100, Miss: 100, CacheWrite: 80, Output: 1, CacheReported: 1, Cost: 0.5, CostReported: 1}, true},
		{"deepseek hit only", `{"prompt_tokens":10,"prompt_cache_hit_tokens":4,"completion_tokens":1}`,
			ShapeDeepSeek, Usage{Prompt: 10, Hit: 4, Miss: 6, Output: 1, CacheReported: 1}, true},
		{"anthropic cache read and write", `{"input_tokens":10,"cache_read_input_tokens":300,"cache_creation_input_tokens":50,"output_tokens":7}`,
			ShapeAnthropic, Usage{Prompt: 360, Hit: 300, Miss: 60, CacheWrite: 50, Output: 7, CacheReported: 1}, true},
		{"anthropic delta without input", `{"output_tokens":15}`, ShapeAnthropic, Usage{Output: 15}, true},
		{"responses cached", `{"input_tokens":200,"input_tokens_details":{"cached_tokens":128},"output_tokens":9,"output_tokens_details":{"reasoning_tokens":4}}`,
			ShapeResponses, Usage{Prompt: 200, Hit: 128, Miss: 72, Output: 9, Reasoning: 4, CacheReported: 1}, true},
		{"cached above prompt", `{"prompt_tokens":10,"prompt_tokens_details":{"cached_tokens":20}}`, ShapeOpenAI, Usage{Prompt: 10, Hit: 10, CacheReported: 1}, true},
		{"null", `null`, "", Usage{}, false},
		{"no counts", `{"foo":1}`, "", Usage{}, false},
		{"not json", `{`, "", Usage{}, false},
	}
	for _, tt := range tests {
		got, shape, ok := Parse([]byte(tt.raw))
		if got != tt.want || shape != tt.shape || ok != tt.ok {
			t.Errorf("%s: Parse = %+v, %q, %v; want %+v, %q, %v", tt.name, got, shape, ok, tt.want, tt.shape, tt.ok)
		}
	}
}

func TestKind(t *testing.T) {
	for _, tt := range []struct {
		internal bool
		purpose  string
		want     string
	}{{false, "", "primary"}, {true, "", "internal"}, {true, "review-child", "review-child"}, {false, "x", "primary"}} {
		if got := Kind(tt.internal, tt.purpose); got != tt.want {
			t.Errorf("Kind(%v, %q) = %q, want %q", tt.internal, tt.purpose, got, tt.want)
		}
	}
}

// TestMembersAsGjson: the one-pass member lookup answers every path the
// shapes ask as gjson's own lookup does: repeated keys (the first wins),
// nested paths, missing keys, and an object with more members than kept.
func TestMembersAsGjson(t *testing.T) {
	many := `{`
	for i := range maxMembers + 5 {
		many += fmt.Sprintf(`"k%d":%d,`, i, i)
	}
	many += `"prompt_tokens":7}`
	for _, obj := range []string{
		`{"prompt_tokens":5,"prompt_tokens":9,"prompt_tokens_details":{"cached_tokens":3},"cost":0.5}`,
		`{"input_tokens":1,"cache_read_input_tokens":2,"output_tokens_details":{"reasoning_tokens":4}}`,
		`{}`,
		`{"prompt_tokens_details":null,"prompt_tokens_details":{"cached_tokens":2}}`,
		many,
	} {
		var m members
		m.read(gjson.Parse(obj))
		for _, path := range []string{"prompt_tokens", "prompt_tokens_details.cached_tokens", "cost", "input_tokens",
			"cache_read_input_tokens", "output_tokens_details.reasoning_tokens", "missing", "missing.inner", "k3", fmt.Sprintf("k%d", maxMembers+2)} {
			got, want := m.Get(path), gjson.Get(obj, path)
			if got.Raw != want.Raw || got.Exists() != want.Exists() {
				t.Errorf("%s: Get(%q) = %q, gjson says %q", obj[:min(len(obj), 40)], path, got.Raw, want.Raw)
			}
		}
	}
}
