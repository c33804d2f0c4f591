package fakeupstream_test

import (
	"io"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
	"github.com/shaperproxy/shaperproxy/internal/render"
)

// usageOf posts body and returns the usage of the non-streamed answer.
func usageOf(t *testing.T, url, body string) gjson.Result {
	t.Helper()
	resp := post(t, nil, nil, url+"/v1/chat/completions", body)
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return gjson.GetBytes(b, "usage")
}

func appendMessage(t *testing.T, body, msg string) string {
	t.Helper()
	out, err := sjson.SetRaw(body, "messages.-1", msg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPromptCacheByPrefix: with a prompt cache, the second request of a
// tool loop hits everything the first one sent plus the reply as the
// template renders it in history; a request that changes an early
// message hits only up to the last whole unit before the change; the
// usage has DeepSeek's shape and adds up.
func TestPromptCacheByPrefix(t *testing.T) {
	for _, tmpl := range []string{"qwen3", render.V4, ""} {
		t.Run(tmpl, func(t *testing.T) {
			s, ts := newServer(t)
			var rd render.Renderer
			if tmpl != "" {
				var err error
				if rd, err = render.Named(tmpl); err != nil {
					t.Fatal(err)
				}
			}
			cache := fakeupstream.NewPromptCache(rd, 16)
			s.SetPromptCache(cache)
			reasoning := strings.Repeat("I should read the file before answering. ", 40)
			s.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{Reasoning: reasoning,
				ToolCalls: []fakeupstream.ToolCall{{Name: "read_file", Arguments: `{"path":"a.go"}`}}}})
			first := `{"model":"m","tools":[{"type":"function","function":{"name":"read_file","parameters":{"type":"object"}}}],"messages":[{"role":"system","content":"` +
				strings.Repeat("You are careful. ", 50) + `"},{"role":"user","content":"what is in a.go?"}]}`
			u1 := usageOf(t, ts.URL, first)
			if u1.Get("prompt_cache_hit_tokens").Int() != 0 || u1.Get("prompt_cache_miss_tokens").Int() != u1.Get("prompt_tokens").Int() {
				t.Fatalf("first request: %s", u1.Raw)
			}
			// The client sends the reply back, as agents do, and the tool result.
			reply := `{"role":"assistant","content":"","reasoning_content":` + quoteJSON(reasoning) +
				`,"tool_calls":[{"id":"call_00_fake00000000000000000001","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"a.go\"}"}}]}`
			second := appendMessage(t, appendMessage(t, first, reply), `{"role":"tool","tool_call_id":"call_00_fake00000000000000000001","content":"package a"}`)
			u2 := usageOf(t, ts.URL, second)
			hit2, prompt2 := u2.Get("prompt_cache_hit_tokens").Int(), u2.Get("prompt_tokens").Int()
			if tmpl != "" && hit2 <= u1.Get("prompt_tokens").Int()+int64(len(reasoning)/4)-8 {
				t.Errorf("second request hit %d of %d tokens: the reply (%d tokens of reasoning) was not cached as output", hit2, prompt2, len(reasoning)/4)
			}
			if hit2 < u1.Get("prompt_tokens").Int()-16 || hit2 >= prompt2 {
				t.Errorf("second request: hit %d, prompt %d, first prompt %d", hit2, prompt2, u1.Get("prompt_tokens").Int())
			}
			if u2.Get("prompt_tokens_details.cached_tokens").Int() != hit2 || u2.Get("prompt_cache_miss_tokens").Int() != prompt2-hit2 {
				t.Errorf("usage shape: %s", u2.Raw)
			}
			// Change the user message: only the system prompt (and tools) still hit.
			changed := strings.Replace(second, "what is in a.go?", "what is in b.go?", 1)
			u3 := usageOf(t, ts.URL, changed)
			if h := u3.Get("prompt_cache_hit_tokens").Int(); h == 0 || h > u1.Get("prompt_tokens").Int() || h%16 != 0 {
				t.Errorf("changed request: hit %d (first prompt %d, unit 16)", h, u1.Get("prompt_tokens").Int())
			}
			if n := len(cache.Usages()); n != 3 {
				t.Errorf("%d usages recorded", n)
			}
		})
	}
}

func quoteJSON(s string) string {
	out, _ := sjson.Set(`{}`, "s", s)
	return gjson.Get(out, "s").Raw
}
