package guard

import (
	"testing"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// wantRunes is what the guard counted before reasoningRunes.
func wantRunes(data []byte) int {
	return utf8.RuneCountInString(conv.DeltaReasoning(gjson.GetBytes(data, "choices.0.delta")))
}

var runeChunks = []string{
	`{"choices":[{"index":0,"delta":{"reasoning_content":"plain text"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"line\nnext \"q\" \\ \/ \b\f\r\t"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"é 中文 \u00e9 \ud83d\ude00 \ud83d \ude00 \ud83dx \uzzzz"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning":"r","reasoning_content":null}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"bad \x escape"}}]}`,
	`{"choices":[{"index":0,"delta":{"reasoning_content":"cut \u12"}}]}`,
	"{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"ctl \x01 \\n\"}}]}",
	"{\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"bad utf-8 \xe2\x82 \\n \xff\"}}]}",
	`{"choices":[{"index":0,"delta":{"content":"no reasoning"}}]}`,
	`{"choices":[]}`,
	`not json`,
	``,
}

func TestReasoningRunes(t *testing.T) {
	for _, c := range runeChunks {
		if got, _ := reasoningRunes([]byte(c), nil); got != wantRunes([]byte(c)) {
			t.Errorf("%q: %d runes, want %d", c, got, wantRunes([]byte(c)))
		}
	}
}

func FuzzReasoningRunes(f *testing.F) {
	for _, c := range runeChunks {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, data := range [][]byte{[]byte(s), []byte(`{"choices":[{"delta":{"reasoning_content":"` + s + `"}}]}`)} {
			if got, _ := reasoningRunes(data, nil); got != wantRunes(data) {
				t.Fatalf("%q: %d runes, want %d", data, got, wantRunes(data))
			}
		}
	})
}

// TestReasoningRunesAllocs: a chunk with escapes costs no allocation once
// the scratch buffer has grown.
func TestReasoningRunesAllocs(t *testing.T) {
	data := []byte(`{"choices":[{"index":0,"delta":{"reasoning_content":"so the fix is:\n\t\"x\" \u00e9"}}]}`)
	_, buf := reasoningRunes(data, nil)
	if n := testing.AllocsPerRun(100, func() { _, buf = reasoningRunes(data, buf) }); n != 0 {
		t.Errorf("%v allocations per chunk", n)
	}
}
