package guard

import (
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
)

// TestBodyCharsAsAssembled: reading a non-stream body where it lies gives
// what assembling it gives.
func TestBodyCharsAsAssembled(t *testing.T) {
	for _, body := range []string{
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":"Hmm, wait. Das ist ünïcode\n."},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning":"via OpenRouter"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":null,"reasoning":"second field"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"<think>inline\nthought</think>answer"},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":0,"message":{"role":"assistant","content":"plain"},"finish_reason":"stop"}]}`,
		// Not the usual shape: content in parts, choices out of order, a
		// choice without a message.
		`{"choices":[{"index":0,"message":{"role":"assistant","content":[{"type":"text","text":"<think>abc</think>x"}]},"finish_reason":"stop"}]}`,
		`{"choices":[{"index":1,"message":{"role":"assistant","content":"ok","reasoning_content":"second choice"}},{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":"r"}}]}`,
		`{"choices":[{"index":0,"finish_reason":"stop"}]}`,
	} {
		asm := conv.NewAssembler()
		if err := asm.AddBody([]byte(body)); err != nil {
			t.Fatal(err)
		}
		want := stepChars(asm.Response().Choices[0])
		// Read here, and from what the proxy read for every sink.
		read := conv.ReadAnswer([]byte(body))
		for _, a := range []*conv.Answer{nil, &read} {
			got, ok := bodyChars([]byte(body), a)
			if !ok || got != want {
				t.Errorf("%s (answer given: %v): got %d (%v), want %d", body, a != nil, got, ok, want)
			}
		}
	}
	for _, bad := range []string{`{"choices":[`, `{"choices":[]}`, `{"error":{"message":"x"}}`, `{"choices":[{"index":0,"message":{"content":"x"}}]`} {
		read := conv.ReadAnswer([]byte(bad))
		for _, a := range []*conv.Answer{nil, &read} {
			if n, ok := bodyChars([]byte(bad), a); ok {
				t.Errorf("%s (answer given: %v): got %d, want no measure", bad, a != nil, n)
			}
		}
	}
}
