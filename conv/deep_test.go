package conv

import (
	"errors"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// deepBody is the request of issue 10: a chat body whose messages array
// opens n arrays and never closes them.
func deepBody(n int) string {
	return `{"model":"m","messages":` + strings.Repeat("[", n)
}

// closed returns a value nested n levels deep (arrays and objects
// alternating) that is valid JSON apart from its depth.
func closed(n int) string {
	return strings.Repeat(`[{"k":`, n/2) + `0` + strings.Repeat(`}]`, n/2)
}

// TestParseRequestDeepNesting: no body crashes the parse. Twelve million
// unclosed '[' (the body of issue 10) and three million closed levels are
// not JSON to the proxy; nesting within MaxDepth is parsed as before.
func TestParseRequestDeepNesting(t *testing.T) {
	testenv.WithStack(t, testenv.DeepStack, func() {
		for name, body := range map[string]string{
			"12M unclosed":            deepBody(12_000_000),
			"3M closed":               `{"model":"m","messages":[` + closed(3_000_000) + `]}`,
			"1M objects in a message": `{"messages":[{"role":"user","content":` + strings.Repeat(`{"a":`, 1_000_000) + `1` + strings.Repeat(`}`, 1_000_000) + `}]}`,
			"one level too deep":      `{"messages":[` + closed(MaxDepth) + `]}`,
		} {
			if _, err := ParseRequest([]byte(body)); !errors.Is(err, ErrNotChat) {
				t.Errorf("%s: err %v, want ErrNotChat", name, err)
			}
		}
		args := closed(MaxDepth - 10)
		body := `{"messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":` + args + `}}]}]}`
		r, err := ParseRequest([]byte(body))
		if err != nil || len(r.Messages) != 1 || r.Messages[0].ToolCalls[0].Arguments != args {
			t.Fatalf("nesting within MaxDepth: %v", err)
		}
	})
}

// TestResponseDeepNesting: the response side (Assembler, Finishes,
// DeltaReasoning) reads upstream chunks nested millions of levels deep
// without recursing.
func TestResponseDeepNesting(t *testing.T) {
	deep := strings.Repeat(`{"a":[`, 1_000_000)
	chunks := []string{
		`{"choices":[{"index":0,"delta":` + deep,
		`{"choices":[{"index":0,"finish_reason":"stop","delta":{"content":` + deep,
		`{"choices":[{"delta":{"reasoning_content":"r"}},` + closed(2_000_000) + `]}`,
		`{"usage":` + closed(2_000_000) + `}`,
	}
	testenv.WithStack(t, testenv.DeepStack, func() {
		a := NewAssembler()
		for _, c := range chunks {
			if err := a.AddChunk([]byte(c)); !errors.Is(err, ErrBadChunk) {
				t.Errorf("AddChunk: err %v, want ErrBadChunk", err)
			}
			if err := a.AddBody([]byte(c)); !errors.Is(err, ErrBadChunk) {
				t.Errorf("AddBody: err %v, want ErrBadChunk", err)
			}
			Finishes([]byte(c))
		}
		if r := a.Response(); len(r.Choices) != 0 || r.Usage != nil {
			t.Errorf("invalid chunks changed the response: %+v", r)
		}
		if !Finishes([]byte(chunks[1])) {
			t.Error("Finishes missed the finish_reason before the deep value")
		}
	})
}

// BenchmarkParseRequestDeep parses the 3-million-level body of issue 10
// (3 MB of '['): rejected as not JSON, in one pass, with no stack growth.
// Peak memory is the process's: run the test binary under /usr/bin/time -v
// (gjson's recursive validator took 829 MB of stack here).
func BenchmarkParseRequestDeep(b *testing.B) {
	body := []byte(deepBody(3_000_000))
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseRequest(body); !errors.Is(err, ErrNotChat) {
			b.Fatal(err)
		}
	}
}
