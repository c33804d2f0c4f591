package review

import (
	"fmt"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
)

// longHistory is a 600-message agent conversation: a system prompt, 140
// closed turns of 4 messages (user, assistant with reasoning and a tool
// call, the result, the answer with reasoning), then an open tool loop of
// 39 messages (user, 19 steps with their results).
func longHistory() []byte {
	reasoning := strings.Repeat("I should check the file before editing it, then run the tests. ", 5)
	result := strings.Repeat("line of tool output with some code in it; ", 12)
	msgs := []string{msg("role", "system", "content", strings.Repeat("You are a careful coding agent. ", 40))}
	for i := range 140 {
		id := fmt.Sprintf("call_%d", i)
		msgs = append(msgs,
			msg("role", "user", "content", fmt.Sprintf("Task %d: fix the bug in module %d.", i, i)),
			msg("role", "assistant", "content", "Reading the file.", "reasoning_content", reasoning, "tool_calls", []any{call(id, "read_file", fmt.Sprintf(`{"path":"m%d.go"}`, i))}),
			msg("role", "tool", "tool_call_id", id, "content", result),
			msg("role", "assistant", "content", fmt.Sprintf("Fixed module %d.", i), "reasoning_content", reasoning))
	}
	msgs = append(msgs, msg("role", "user", "content", "Now refactor the parser."))
	for i := range 19 {
		id := fmt.Sprintf("open_%d", i)
		msgs = append(msgs,
			msg("role", "assistant", "content", fmt.Sprintf("Step %d.", i), "reasoning_content", reasoning, "tool_calls", []any{call(id, "edit_file", fmt.Sprintf(`{"path":"parser.go","n":%d}`, i))}),
			msg("role", "tool", "tool_call_id", id, "content", result))
	}
	return requestBody(msgs)
}

// BenchmarkBuildChild builds the child of a 600-message history.
// child-bytes/primary-bytes compare the prompt sizes; seed-bytes is the
// part of the child's messages copied verbatim (prefix-cacheable).
func BenchmarkBuildChild(b *testing.B) {
	primary := mustParse(b, longHistory())
	if n := len(primary.Messages); n != 600 {
		b.Fatalf("%d messages", n)
	}
	var c child
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		var err error
		if c, err = buildChild(primary, testDraft(), childOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(c.Stats.PrimaryBytes), "primary-bytes")
	b.ReportMetric(float64(c.Stats.ChildBytes), "child-bytes")
	b.ReportMetric(float64(c.Stats.SeedBytes), "seed-bytes")
	b.ReportMetric(float64(c.Stats.SnapshotChars), "snapshot-chars")
}

// BenchmarkRestore measures Restore on the same history with no revised
// turn in it: the per-request cost when the feature is on.
func BenchmarkRestore(b *testing.B) {
	primary := mustParse(b, longHistory())
	lookup, _ := lookupOf()
	b.ReportAllocs()
	for b.Loop() {
		if _, n, err := Restore(primary, lookup); n != 0 || err != nil {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkRestoreLongTexts is BenchmarkRestore on a history whose
// assistant turns carry 2 KB of markdown each (300 of them): searched
// every time (none) against the Restorer's memo, warm from the previous
// request of the conversation (memo).
func BenchmarkRestoreLongTexts(b *testing.B) {
	text := strings.Repeat("I'll update the handler.\n\n- read the body\n- check the header\n", 30)
	var msgs []string
	for i := range 300 {
		msgs = append(msgs, msg("role", "user", "content", fmt.Sprintf("step %d", i)), msg("role", "assistant", "content", text))
	}
	req := mustParse(b, requestBody(msgs))
	lookup, _ := lookupOf()
	for _, c := range []struct {
		name string
		memo *resolved.Cache[conv.RawKey, bool]
	}{{"none", nil}, {"memo", resolved.New[conv.RawKey, bool](maxScanned)}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, n, err := restore(req, lookup, c.memo); n != 0 || err != nil {
					b.Fatal(n, err)
				}
			}
		})
	}
}
