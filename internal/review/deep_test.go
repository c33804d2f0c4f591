package review

import (
	"runtime/debug"
	"strings"
	"testing"
)

// TestDeepUpstreamJSON: bytes an upstream sends (a chunk, a usage object)
// nested millions of levels deep are "not JSON" to the review's mergers,
// never a stack overflow (Go cannot recover from one: every stream dies).
func TestDeepUpstreamJSON(t *testing.T) {
	old := debug.SetMaxStack(16 << 20)
	defer debug.SetMaxStack(old)
	deep := []byte(`{"usage":` + strings.Repeat(`{"a":`, 2_000_000))
	if out, err := SumUsage([]byte(`{"prompt_tokens":1}`), deep); err != nil || string(out) != string(deep) {
		t.Errorf("SumUsage on deep input: %v", err)
	}
	m, err := newStreamMerger([]byte(`{"id":"x","choices":[]}`), Draft{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Next(append(append([]byte("data: "), deep...), '\n', '\n')); err != nil {
		t.Errorf("merger: %v", err)
	}
	if _, err := newStreamMerger(deep, Draft{}); err == nil {
		t.Error("a deep first chunk was accepted")
	}
}
