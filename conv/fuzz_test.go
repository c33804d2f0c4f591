package conv

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// requestSeeds are the corpus seeds of FuzzParseRequest besides testdata.
var requestSeeds = []string{
	`{"messages":[]}`,
	`{"messages":[{"role":"user","content":"hi"},{"role":"assistant","reasoning_content":"a\"\u00e9","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"x"}]}`,
	`{"messages":[{"role":"assistant","reasoning":null,"reasoning_content":"x","reasoning_details":[{}],"content":[{"type":"text","text":"t"},{"type":"image_url"}]}]}`,
	`{"messages":[{"role":"user","role":"assistant","reasoning":"a","reasoning":"b"}],"messages":[1]}`,
	`{"messages":[{"role":"assistant","tool_calls":[{"extra_content":{"google":{"thought_signature":"s"}}}]}]}`,
}

func FuzzParseRequest(f *testing.F) {
	for _, name := range append(multiturn, "anthropic_tool-use-with-thinking.request2.json") {
		f.Add(readTestdata(f, name))
	}
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	// Issue 10: nesting that once overflowed the stack, at and past the
	// depth limit, in the body and inside a message.
	f.Add([]byte(deepBody(12_000)))
	f.Add([]byte(`{"messages":[` + closed(MaxDepth-2) + `]}`))
	f.Add([]byte(`{"messages":[` + closed(MaxDepth) + `]}`))
	f.Add([]byte(`{"messages":[{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":` + closed(MaxDepth-6) + `}}]}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := ParseRequest(body)
		checkNotChatAgreement(t, body, err)
		if err != nil {
			return
		}
		for i, m := range r.Messages {
			checkMessageRanges(t, r, i, m)
		}
		checkTurns(t, r)
		checkTally(t, r)
		r.ToolCallsPending()
		if k := ConversationKey(r, ""); !keyPattern.MatchString(k) {
			t.Fatalf("key %q", k)
		}
	})
}

// checkNotChatAgreement compares ParseRequest's verdict with encoding/json.
func checkNotChatAgreement(t *testing.T, body []byte, err error) {
	var doc map[string]json.RawMessage
	ok := utf8.Valid(body) && json.Unmarshal(body, &doc) == nil
	var arr []json.RawMessage
	ok = ok && json.Unmarshal(doc["messages"], &arr) == nil && arr != nil
	if ok != (err == nil) {
		t.Fatalf("ParseRequest error %v, encoding/json says chat = %v", err, ok)
	}
}

// checkMessageRanges checks the byte ranges of message i.
func checkMessageRanges(t *testing.T, r *Request, i int, m Message) {
	if m.Index != i || m.Start < 0 || m.Start > m.End || m.End > len(r.Body) || !json.Valid(r.Body[m.Start:m.End]) {
		t.Fatalf("message %d: Index %d range [%d,%d) of %d", i, m.Index, m.Start, m.End, len(r.Body))
	}
	if m.ReasoningStart == -1 {
		if m.ReasoningEnd != -1 || m.Reasoning != "" {
			t.Fatalf("message %d: no range but ReasoningEnd %d, Reasoning %q", i, m.ReasoningEnd, m.Reasoning)
		}
		return
	}
	if !m.HasReasoningKey || m.ReasoningStart < m.Start || m.ReasoningEnd > m.End || m.ReasoningStart >= m.ReasoningEnd {
		t.Fatalf("message %d: reasoning range [%d,%d) in [%d,%d)", i, m.ReasoningStart, m.ReasoningEnd, m.Start, m.End)
	}
	var s string
	if err := json.Unmarshal(r.Body[m.ReasoningStart:m.ReasoningEnd], &s); err != nil || s != m.Reasoning {
		t.Fatalf("message %d: range %q decodes to %q (%v), Reasoning %q", i, r.Body[m.ReasoningStart:m.ReasoningEnd], s, err, m.Reasoning)
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(r.Body[m.Start:m.End], &msg); err != nil || !bytes.Equal(msg[m.ReasoningField], r.Body[m.ReasoningStart:m.ReasoningEnd]) {
		t.Fatalf("message %d: %s is %q in encoding/json, range %q", i, m.ReasoningField, msg[m.ReasoningField], r.Body[m.ReasoningStart:m.ReasoningEnd])
	}
}

// checkTurns checks that turns tile the messages from the first user
// message on, and that each message is placed at most once.
func checkTurns(t *testing.T, r *Request) {
	first := -1
	for i, m := range r.Messages {
		if m.Role == RoleUser {
			first = i
			break
		}
	}
	turns := r.Turns()
	if (first < 0) != (len(turns) == 0) {
		t.Fatalf("first user %d, %d turns", first, len(turns))
	}
	next := first
	seen := map[int]bool{}
	for n, tr := range turns {
		if tr.Ordinal != n+1 || tr.Start != next || tr.End <= tr.Start || r.Messages[tr.Start].Role != RoleUser {
			t.Fatalf("turn %+v, expected start %d", tr, next)
		}
		next = tr.End
		for _, i := range turnMembers(tr) {
			if seen[i] || !tr.Contains(i) {
				t.Fatalf("message %d placed twice or outside turn %+v", i, tr)
			}
			seen[i] = true
		}
	}
	if len(turns) > 0 && (next != len(r.Messages) || len(seen) != next-first) {
		t.Fatalf("turns end at %d, placed %d of %d", next, len(seen), len(r.Messages)-first)
	}
}

// turnMembers lists every message index a turn places.
func turnMembers(tr Turn) []int {
	out := append([]int(nil), tr.Inputs...)
	for _, s := range tr.Steps {
		out = append(out, s.Assistant)
		out = append(out, s.ToolResults...)
	}
	return out
}

func FuzzAssembler(f *testing.F) {
	// A few real lines, not whole captures: the fuzzer minimizes every new
	// input, and a 16 KB seed makes that take a minute of each run.
	lines := testdataLines(f, "deepseek-reasoner_tool-call_stream.vercel-ai.chunks.jsonl")
	f.Add(bytes.Join([][]byte{lines[0], lines[1], lines[40], lines[41], lines[len(lines)-1], []byte("[DONE]")}, []byte("\n")))
	or := testdataLines(f, "openrouter_o3_stream.data.txt")
	f.Add(bytes.Join(append(or[:1:1], or[len(or)-3:]...), []byte("\n")))
	f.Add([]byte(`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"","reasoning_content":"r","tool_calls":[{"index":0,"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"total_tokens":1}}`))
	f.Add([]byte(`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a"},{"index":-1,"function":{"arguments":{}}}]}}]}` + "\n[DONE]\n{}"))
	f.Add([]byte(`{"choices":[{"index":1e30,"delta":{"reasoning":"a","reasoning_content":"b"}}],"usage":{"x":1}}`))
	f.Add([]byte(`{"choices":[{"index":0,"finish_reason":"stop","delta":` + strings.Repeat(`{"a":[`, 6_000) + "\n[DONE]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a := NewAssembler()
		_ = a.AddBody(data)
		chunks := 0
		for _, line := range bytes.Split(data, []byte("\n")) {
			if strings.TrimSpace(string(line)) != "[DONE]" {
				chunks++
			}
			_ = a.AddChunk(line)
		}
		r := a.Response()
		checkResponse(t, r)
		if r.Chunks != chunks {
			t.Fatalf("Chunks %d, want %d", r.Chunks, chunks)
		}
	})
}

// checkResponse checks the invariants of a rebuilt response.
func checkResponse(t *testing.T, r Response) {
	for i, c := range r.Choices {
		if i > 0 && r.Choices[i-1].Index >= c.Index {
			t.Fatalf("choices not sorted: %d then %d", r.Choices[i-1].Index, c.Index)
		}
		for j, tc := range c.ToolCalls {
			if j > 0 && c.ToolCalls[j-1].Index >= tc.Index {
				t.Fatalf("tool calls not sorted: %d then %d", c.ToolCalls[j-1].Index, tc.Index)
			}
		}
	}
	if r.Usage != nil && !json.Valid(r.Usage) {
		t.Fatalf("usage %q is not json", r.Usage)
	}
}
