package reqshape

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tidwall/sjson"
)

// seedCase builds a request shaped like the seed's real case: 631
// messages and about 856,000 characters, 191 of them assistant steps with
// reasoning, the rest tool results. It is deterministic.
func seedCase() []byte {
	rng := rand.New(rand.NewPCG(4, 856))
	sentences := []string{
		"Hmm, let me think about this again.", "Wait, that is not right.",
		"The handler reads the whole body before it parses the header.",
		"So the fix is to stream the body through a bounded buffer.",
		"I'll run the tests for the proxy package next.", "Let me check the config loader first.",
		"Actually the timeout is set in two places.", "Therefore the second one wins.",
		"The test fails because the fixture has a trailing newline.", "Okay so the order of keys matters here.",
		"I need to keep the reasoning field on messages with tool calls.", "Maybe the cache key includes the model name.",
	}
	para := func(chars int) string {
		var b strings.Builder
		for b.Len() < chars {
			b.WriteString(sentences[rng.IntN(len(sentences))])
			b.WriteByte(' ')
		}
		return b.String()
	}
	body := []byte(`{"model":"deepseek-reasoner","stream":true,"tools":[{"type":"function","function":{"name":"bash"}}],"messages":[{"role":"system","content":"You are a coding agent."},{"role":"user","content":"Fix the flaky proxy test."}]}`)
	n := 2
	for step := 0; n < 631; step++ {
		m := []byte(`{"role":"assistant","content":"","reasoning_content":"","tool_calls":[{"id":"","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"go test ./...\"}"}}]}`)
		m, _ = sjson.SetBytes(m, "reasoning_content", para(2300+rng.IntN(400)))
		m, _ = sjson.SetBytes(m, "tool_calls.0.id", fmt.Sprintf("call_%d", step))
		body, _ = sjson.SetRawBytes(body, "messages.-1", m)
		n++
		for k := 0; k < 2 && n < 631; k++ {
			r := []byte(`{"role":"tool","tool_call_id":"","content":""}`)
			r, _ = sjson.SetBytes(r, "tool_call_id", fmt.Sprintf("call_%d", step))
			r, _ = sjson.SetBytes(r, "content", para(860))
			body, _ = sjson.SetRawBytes(body, "messages.-1", r)
			n++
		}
	}
	return bytes.Clone(body)
}

func TestSeedCaseShape(t *testing.T) {
	body := seedCase()
	v := view(t, body)
	chars := 0
	for _, m := range v.Messages {
		chars += len([]rune(m.Content)) + len([]rune(m.Reasoning))
	}
	if len(v.Messages) != 631 || chars < 800_000 || chars > 920_000 {
		t.Fatalf("seed case has %d messages and %d characters", len(v.Messages), chars)
	}
	res := Apply(v, Rule{})
	if res.Shaped < 180 {
		t.Fatalf("shaped %d blocks", res.Shaped)
	}
	memo := NewMemo(4096)
	for i := 0; i < 2; i++ {
		if got := ApplyMemo(v, Rule{}, memo); !bytes.Equal(got.Body, res.Body) {
			t.Fatalf("memo run %d differs from a plain run", i)
		}
	}
	if hits, _ := memo.Stats(); hits < uint64(res.Shaped) {
		t.Fatalf("second run hit the memo %d times", hits)
	}
}

// BenchmarkSeedCase shapes the seed's 631-message, 856k-character request
// from scratch (target: ≤ 5 ms on one core).
func BenchmarkSeedCase(b *testing.B) {
	body := seedCase()
	v := view(b, body)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		Apply(v, Rule{})
	}
}

// BenchmarkSeedCaseWarm is the common case: the history was shaped by the
// previous request and the memo answers (parse included).
func BenchmarkSeedCaseWarm(b *testing.B) {
	body := seedCase()
	memo := NewMemo(4096)
	ApplyMemo(view(b, body), Rule{}, memo)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for b.Loop() {
		ApplyMemo(view(b, body), Rule{}, memo)
	}
}

// BenchmarkParseOnly is the floor: the conversation model's parse that
// every chat request pays anyway.
func BenchmarkParseOnly(b *testing.B) {
	body := seedCase()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		view(b, body)
	}
}
