package conv

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// independent is a response rebuilt with encoding/json and a plain loop,
// to check the Assembler against.
type independent struct {
	reasoning, content, finish string
	calls                      map[float64]*ToolCall
	usage                      json.RawMessage
}

// rebuild concatenates the fields of choice 0 of each chunk.
func rebuild(t *testing.T, chunks [][]byte) independent {
	t.Helper()
	out := independent{calls: map[float64]*ToolCall{}}
	for _, c := range chunks {
		var chunk struct {
			Choices []map[string]any
			Usage   json.RawMessage
		}
		if err := json.Unmarshal(c, &chunk); err != nil {
			t.Fatal(err)
		}
		if string(chunk.Usage) != "null" && chunk.Usage != nil {
			out.usage = chunk.Usage
		}
		for _, ch := range chunk.Choices {
			out.addChoice(ch)
		}
	}
	return out
}

// addChoice folds one choice object into out.
func (out *independent) addChoice(ch map[string]any) {
	if f, ok := ch["finish_reason"].(string); ok {
		out.finish = f
	}
	d := ch["delta"].(map[string]any)
	if s, ok := d["reasoning_content"].(string); ok {
		out.reasoning += s
	}
	if s, ok := d["content"].(string); ok {
		out.content += s
	}
	calls, _ := d["tool_calls"].([]any)
	for _, c := range calls {
		c := c.(map[string]any)
		f := c["function"].(map[string]any)
		idx := c["index"].(float64)
		tc := out.calls[idx]
		if tc == nil {
			tc = &ToolCall{Index: int(idx), ID: c["id"].(string), Type: c["type"].(string), Name: f["name"].(string)}
			out.calls[idx] = tc
		}
		tc.Arguments += f["arguments"].(string)
	}
}

func TestAssemblerDeepSeekToolCallStream(t *testing.T) {
	chunks := testdataLines(t, "deepseek-reasoner_tool-call_stream.vercel-ai.chunks.jsonl")
	a := NewAssembler()
	for _, c := range chunks {
		if err := a.AddChunk(c); err != nil {
			t.Fatal(err)
		}
	}
	got := a.Response()
	want := rebuild(t, chunks)
	if got.ID != "cca85624-4056-401f-b220-d77601d1f70d" || got.Model != "deepseek-reasoner" || got.Chunks != 52 || got.Done {
		t.Errorf("ID %q Model %q Chunks %d Done %v", got.ID, got.Model, got.Chunks, got.Done)
	}
	if len(got.Choices) != 1 {
		t.Fatalf("%d choices", len(got.Choices))
	}
	c := got.Choices[0]
	if c.Reasoning != want.reasoning || c.Content != want.content || c.FinishReason != want.finish {
		t.Errorf("choice = %+v\nwant reasoning %q content %q finish %q", c, want.reasoning, want.content, want.finish)
	}
	if !strings.HasPrefix(c.Reasoning, "The user is asking for the weather in San Francisco. I need to use the weather tool") {
		t.Errorf("Reasoning = %q", c.Reasoning)
	}
	wantCalls := []ToolCall{*want.calls[0]}
	if !reflect.DeepEqual(c.ToolCalls, wantCalls) || c.ToolCalls[0].Arguments != `{"location": "San Francisco"}` {
		t.Errorf("ToolCalls = %+v, want %+v", c.ToolCalls, wantCalls)
	}
	if c.Role != "assistant" || c.ReasoningField != "reasoning_content" || c.FinishReason != "tool_calls" || c.HasSignedReasoning {
		t.Errorf("Role %q ReasoningField %q FinishReason %q signed %v", c.Role, c.ReasoningField, c.FinishReason, c.HasSignedReasoning)
	}
	if !bytes.Equal(got.Usage, want.usage) || !bytes.Contains(got.Usage, []byte(`"completion_tokens":83`)) {
		t.Errorf("Usage = %s, want %s", got.Usage, want.usage)
	}
	if err := a.AddChunk([]byte("[DONE]")); err != nil || !a.Response().Done || a.Response().Chunks != 52 {
		t.Errorf("[DONE]: err %v, Response %+v", err, a.Response())
	}
}

func TestAssemblerDeepSeekToolCallBody(t *testing.T) {
	body := readTestdata(t, "deepseek-reasoner_tool-call_nonstream.vercel-ai.json")
	var doc struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Role, Content    string
				ReasoningContent string `json:"reasoning_content"`
				ToolCalls        []struct {
					Index    int
					ID, Type string
					Function struct{ Name, Arguments string }
				} `json:"tool_calls"`
			}
		}
		Usage json.RawMessage
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	a := NewAssembler()
	if err := a.AddBody(body); err != nil {
		t.Fatal(err)
	}
	got := a.Response()
	m := doc.Choices[0].Message
	tc := m.ToolCalls[0]
	want := Choice{
		Role: m.Role, ReasoningField: "reasoning_content", Reasoning: m.ReasoningContent, Content: m.Content,
		FinishReason: doc.Choices[0].FinishReason,
		ToolCalls:    []ToolCall{{Index: tc.Index, ID: tc.ID, Type: tc.Type, Name: tc.Function.Name, Arguments: tc.Function.Arguments}},
	}
	if len(got.Choices) != 1 || !reflect.DeepEqual(got.Choices[0], want) {
		t.Errorf("Choices = %+v\nwant %+v", got.Choices, want)
	}
	if !bytes.Equal(got.Usage, doc.Usage) || got.Chunks != 0 || got.ID != "7a630f5b-b7e6-4878-82f8-d77db164d42b" {
		t.Errorf("Usage %s Chunks %d ID %q", got.Usage, got.Chunks, got.ID)
	}
}

// TestAssemblerStreamMatchesBodyShape checks that the stream and the body
// of the same DeepSeek exchange rebuild the same fields (the two captures
// are different generations, so only the shape and the fixed parts match).
func TestAssemblerStreamMatchesBodyShape(t *testing.T) {
	s, b := NewAssembler(), NewAssembler()
	for _, c := range testdataLines(t, "deepseek-reasoner_tool-call_stream.vercel-ai.chunks.jsonl") {
		if err := s.AddChunk(c); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.AddBody(readTestdata(t, "deepseek-reasoner_tool-call_nonstream.vercel-ai.json")); err != nil {
		t.Fatal(err)
	}
	sc, bc := s.Response().Choices[0], b.Response().Choices[0]
	if sc.ToolCalls[0].Arguments != bc.ToolCalls[0].Arguments || sc.ToolCalls[0].Name != bc.ToolCalls[0].Name ||
		sc.FinishReason != bc.FinishReason || sc.Content != bc.Content || sc.ReasoningField != bc.ReasoningField {
		t.Errorf("stream %+v\nbody %+v", sc, bc)
	}
}

func TestAssemblerOpenRouterCapture(t *testing.T) {
	lines := testdataLines(t, "openrouter_o3_stream.data.txt")
	a := NewAssembler()
	var content strings.Builder
	for _, l := range lines {
		if err := a.AddChunk(l); err != nil {
			t.Fatal(err)
		}
		var c struct {
			Choices []struct{ Delta struct{ Content *string } }
		}
		if json.Unmarshal(l, &c) == nil && len(c.Choices) > 0 && c.Choices[0].Delta.Content != nil {
			content.WriteString(*c.Choices[0].Delta.Content)
		}
	}
	got := a.Response()
	c := got.Choices[0]
	if !got.Done || got.Chunks != len(lines)-1 || c.Content != content.String() || !strings.HasPrefix(c.Content, "I’m ChatGPT") {
		t.Errorf("Done %v Chunks %d Content %q", got.Done, got.Chunks, c.Content)
	}
	if !c.HasSignedReasoning || c.ReasoningField != "" || c.Reasoning != "" {
		t.Errorf("HasSignedReasoning %v ReasoningField %q Reasoning %q", c.HasSignedReasoning, c.ReasoningField, c.Reasoning)
	}
	if c.FinishReason != "stop" || !bytes.Contains(got.Usage, []byte(`"cost":0.00085`)) {
		t.Errorf("FinishReason %q Usage %s", c.FinishReason, got.Usage)
	}
}

func TestAssemblerUsageShapes(t *testing.T) {
	const u = `{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}`
	tests := []struct {
		name   string
		chunks []string
	}{
		{"inline with finish_reason (DeepSeek)", []string{
			`{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"usage":null}`,
			`{"choices":[{"index":0,"delta":{"content":""},"finish_reason":"stop"}],"usage":` + u + `}`,
			`[DONE]`,
		}},
		{"separate chunk with empty choices (OpenAI)", []string{
			`{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
			`{"choices":[],"usage":` + u + `}`,
			`[DONE]`,
		}},
		{"separate chunk with finish_reason null (OpenRouter)", []string{
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},"finish_reason":null}]}`,
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}`,
			`{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}],"usage":` + u + `}`,
			`[DONE]`,
		}},
		{"usage null after usage keeps it", []string{
			`{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}],"usage":` + u + `}`,
			`{"choices":[],"usage":null}`,
			`[DONE]`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAssembler()
			for _, c := range tt.chunks {
				if err := a.AddChunk([]byte(c)); err != nil {
					t.Fatal(err)
				}
			}
			r := a.Response()
			if string(r.Usage) != u || !r.Done || r.Chunks != len(tt.chunks)-1 {
				t.Errorf("Usage %s Done %v Chunks %d", r.Usage, r.Done, r.Chunks)
			}
			if len(r.Choices) != 1 || r.Choices[0].Content != "hi" || r.Choices[0].FinishReason != "stop" {
				t.Errorf("Choices = %+v", r.Choices)
			}
		})
	}
}

func TestAssemblerFields(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		want   []Choice
	}{
		{
			name: "reasoning field (vLLM, OpenRouter)",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"role":"assistant","reasoning":"a"}}]}`,
				`{"choices":[{"index":0,"delta":{"reasoning":"b","content":null}}]}`,
				`{"choices":[{"index":0,"delta":{"reasoning":null,"content":"c"}}]}`,
			},
			want: []Choice{{Role: "assistant", ReasoningField: "reasoning", Reasoning: "ab", Content: "c"}},
		},
		{
			name: "mirrored fields are not doubled",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"reasoning_content":"a","reasoning":"a"}}]}`,
				`{"choices":[{"index":0,"delta":{"reasoning":"b","reasoning_content":"b"}}]}`,
			},
			want: []Choice{{ReasoningField: "reasoning_content", Reasoning: "ab"}},
		},
		{
			name: "fields interleaved in one chunk stay apart",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"reasoning_content":"r1","content":"c1"}}]}`,
				`{"choices":[{"index":0,"delta":{"content":"c2","reasoning_content":"r2"}}]}`,
			},
			want: []Choice{{ReasoningField: "reasoning_content", Reasoning: "r1r2", Content: "c1c2"}},
		},
		{
			name: "parallel tool calls interleaved",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":""}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"g","arguments":"{"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"g","arguments":"}"}}]},"finish_reason":"tool_calls"}]}`,
			},
			want: []Choice{{FinishReason: "tool_calls", ToolCalls: []ToolCall{
				{Index: 0, ID: "a", Type: "function", Name: "f", Arguments: "{}"},
				{Index: 1, ID: "b", Type: "function", Name: "g", Arguments: "{}"},
			}}},
		},
		{
			name: "id, type and name from the first fragment carrying them",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":"{"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"","type":null,"function":{"name":"","arguments":"}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"other","type":"x","function":{"name":"g","arguments":null}}]}}]}`,
			},
			want: []Choice{{ToolCalls: []ToolCall{{Index: 0, ID: "a", Type: "function", Name: "f", Arguments: "{}"}}}},
		},
		{
			name: "whole calls without index (Ollama, Gemini)",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}},{"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]}}]}`,
				`{"choices":[{"index":0,"delta":{"tool_calls":[{"id":"c","type":"function","function":{"name":"h","arguments":"{}"}}]}}]}`,
			},
			want: []Choice{{ToolCalls: []ToolCall{
				{Index: 0, ID: "a", Type: "function", Name: "f", Arguments: `{"x":1}`},
				{Index: 1, ID: "b", Type: "function", Name: "g", Arguments: "{}"},
				{Index: 2, ID: "c", Type: "function", Name: "h", Arguments: "{}"},
			}}},
		},
		{
			name: "choices by index, sorted",
			chunks: []string{
				`{"choices":[{"index":1,"delta":{"content":"one"}},{"index":0,"delta":{"content":"zero"}}]}`,
				`{"choices":[{"index":1,"delta":{"content":"!"},"finish_reason":"length"}]}`,
			},
			want: []Choice{{Index: 0, Content: "zero"}, {Index: 1, Content: "one!", FinishReason: "length"}},
		},
		{
			name: "reasoning_details",
			chunks: []string{
				`{"choices":[{"index":0,"delta":{"reasoning":"r","reasoning_details":[{"type":"reasoning.text","text":"r","index":0}]}}]}`,
			},
			want: []Choice{{ReasoningField: "reasoning", Reasoning: "r", HasSignedReasoning: true}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAssembler()
			for _, c := range tt.chunks {
				if err := a.AddChunk([]byte(c)); err != nil {
					t.Fatal(err)
				}
			}
			if got := a.Response().Choices; !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Choices =\n%+v\nwant\n%+v", got, tt.want)
			}
		})
	}
}

func TestAssemblerInvalidChunk(t *testing.T) {
	a := NewAssembler()
	for _, bad := range []string{`{"choices":[`, `[1,2]`, `"x"`, ``, `data: {}`} {
		if err := a.AddChunk([]byte(bad)); !errors.Is(err, ErrBadChunk) {
			t.Errorf("AddChunk(%q) = %v, want ErrBadChunk", bad, err)
		}
	}
	if err := a.AddChunk([]byte(`{"id":"x","choices":[{"index":0,"delta":{"content":"ok"}}]}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.AddBody([]byte(`nope`)); !errors.Is(err, ErrBadChunk) {
		t.Errorf("AddBody = %v, want ErrBadChunk", err)
	}
	r := a.Response()
	if r.Chunks != 6 || r.ID != "x" || r.Choices[0].Content != "ok" {
		t.Errorf("after bad chunks: %+v", r)
	}
}

func TestAssemblerErrorAndSnapshot(t *testing.T) {
	a := NewAssembler()
	if err := a.AddChunk([]byte(`{"choices":[{"index":0,"delta":{"content":"a"}}]}`)); err != nil {
		t.Fatal(err)
	}
	snap := a.Response()
	if err := a.AddChunk([]byte(`{"error":{"message":"overloaded","code":503}}`)); err != nil {
		t.Fatal(err)
	}
	if err := a.AddChunk([]byte(`{"choices":[{"index":0,"delta":{"content":"b"}}]}`)); err != nil {
		t.Fatal(err)
	}
	if snap.Choices[0].Content != "a" || snap.Error != nil {
		t.Errorf("snapshot changed: %+v", snap)
	}
	r := a.Response()
	if r.Choices[0].Content != "ab" || string(r.Error) != `{"message":"overloaded","code":503}` {
		t.Errorf("Response = %+v", r)
	}
}

// A bounded Assembler assembles up to its bound, then lets go of what it
// holds and only counts: a long stream read through it keeps nothing.
func TestBoundedAssembler(t *testing.T) {
	chunk := []byte(`{"choices":[{"index":0,"delta":{"content":"abcdefghij"}}]}`)
	a := NewBoundedAssembler(3 * len(chunk))
	for range 3 {
		if err := a.AddChunk(chunk); err != nil {
			t.Fatal(err)
		}
	}
	_ = a.AddChunk([]byte("[DONE]")) // not data: not counted
	if r := a.Response(); a.Over() || len(r.Choices) != 1 || r.Choices[0].Content != "abcdefghijabcdefghijabcdefghij" {
		t.Fatalf("within the bound: over %v, %+v", a.Over(), r.Choices)
	}
	for range 100 {
		_ = a.AddChunk(chunk)
	}
	if r := a.Response(); !a.Over() || len(r.Choices) != 0 || len(a.choices) != 0 {
		t.Fatalf("past the bound: over %v, %d choices kept", a.Over(), len(a.choices))
	}
	if u := NewAssembler(); u.AddChunk(chunk) != nil || u.Over() {
		t.Fatal("an unbounded Assembler is never over")
	}
}
