package conv

import (
	"strings"
	"testing"
	"unsafe"
)

// TestUsageWatcher finds the usage where each kind of stream and body puts it.
func TestUsageWatcher(t *testing.T) {
	long := strings.Repeat("x", 3*tailBytes)
	tests := []struct {
		name   string
		events []string // stream data payloads; nil: body
		body   string
		want   string
	}{
		{"inline with the finish", []string{
			`{"choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}`,
			`[DONE]`,
		}, "", `{"prompt_tokens":3,"completion_tokens":1}`},
		{"separate choices [] chunk", []string{
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}`,
			`{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":2}}`,
		}, "", `{"prompt_tokens":4,"completion_tokens":2}`},
		{"anthropic old delta", []string{
			`{"type":"message_start","message":{"model":"claude","usage":{"input_tokens":25,"cache_read_input_tokens":100,"output_tokens":1}}}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`,
		}, "", `{"output_tokens":15,"input_tokens":25,"cache_read_input_tokens":100}`},
		{"content that mentions usage", []string{
			`{"choices":[{"index":0,"delta":{"content":"the \"usage\":{\"prompt_tokens\":9} key"}}]}`,
		}, "", ``},
		{"small body", nil, `{"id":"x","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1},"system_fingerprint":"fp"}`, `{"prompt_tokens":5,"completion_tokens":1}`},
		{"long body, usage in the tail", nil,
			`{"choices":[{"message":{"content":"` + long + ` \"usage\": {\"prompt_tokens\": 1}"}}], "usage" : {"prompt_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}, "x":"}"}`,
			`{"prompt_tokens":7,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":1}}`},
		{"long body without usage", nil, `{"content":"` + long + `"}`, ``},
	}
	for _, tt := range tests {
		w := &UsageWatcher{}
		for _, e := range tt.events {
			w.Event([]byte(e))
		}
		for b := []byte(tt.body); len(b) > 0; {
			k := min(1000, len(b))
			w.Body(b[:k])
			b = b[k:]
		}
		if got := string(w.Raw()); got != tt.want {
			t.Errorf("%s: Raw = %s, want %s", tt.name, got, tt.want)
		}
	}
}

// TestUsageWatcherInPlace: a chunk with "usage": null costs no
// allocation (OpenAI's include_usage puts it on every chunk), and what
// is kept survives the caller reusing its buffer.
func TestUsageWatcherInPlace(t *testing.T) {
	var w UsageWatcher
	null := []byte(`{"model":"m","choices":[{"index":0,"delta":{"content":"a"}}],"usage":null}`)
	if n := testing.AllocsPerRun(100, func() { w.Event(null) }); n != 0 {
		t.Errorf("%v allocations per usage:null chunk", n)
	}
	buf := []byte(`{"model":"m-1","choices":[],"usage":{"prompt_tokens":3}}`)
	w.Event(buf)
	for i := range buf {
		buf[i] = 'x'
	}
	if string(w.Raw()) != `{"prompt_tokens":3}` || w.Model() != "m-1" {
		t.Fatalf("after the buffer was reused: usage %s, model %q", w.Raw(), w.Model())
	}
}

// TestUsageModelOwnsItsBytes: the model keys long-lived caches (the
// meter's sets), so it is not a string of the answer the watcher keeps,
// which would keep that answer alive with the key.
func TestUsageModelOwnsItsBytes(t *testing.T) {
	w := &UsageWatcher{}
	w.Body([]byte(`{"model":"m-answer","choices":[],"usage":{"prompt_tokens":1}}`))
	raw := w.Raw() // reads the body kept whole, in place
	if w.Model() != "m-answer" || len(raw) == 0 {
		t.Fatalf("model %q, usage %s", w.Model(), raw)
	}
	p := uintptr(unsafe.Pointer(unsafe.StringData(w.Model())))
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(raw))) - 100 // the body around the usage
	if p >= lo && p < lo+200 {
		t.Fatal("the model points into the watched body")
	}
}
