package fakeupstream_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/fakeupstream"
)

// chunkKind classifies a DeepSeek chat chunk.
func chunkKind(data string) string {
	d := gjson.Get(data, "choices.0.delta")
	switch {
	case gjson.Get(data, "choices.0.finish_reason").Type != gjson.Null:
		return "final"
	case d.Get("role").Exists():
		return "first"
	case d.Get("tool_calls.0.id").Exists():
		return "tool-head"
	case d.Get("tool_calls").Exists():
		return "tool-args"
	case d.Get("content").Type == gjson.Null:
		return "reasoning"
	}
	return "content"
}

// recordedShapes returns the key shape of each chunk kind in the recorded
// DeepSeek streams.
func recordedShapes(t *testing.T) map[string][]string {
	t.Helper()
	shapes := map[string][]string{}
	for _, file := range []string{
		"deepseek-reasoner_tool-call_stream.vercel-ai.chunks.jsonl",
		"deepseek-reasoner_stream_raw-sse.pydantic-ai.vcr.yaml",
	} {
		exs, err := fixtures.Load(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range dataOf(mustEvents(t, strings.NewReader(string(exs[0].ResponseBody)))) {
			if k := chunkKind(d); shapes[k] == nil {
				shapes[k] = shape(d)
			}
		}
	}
	if len(shapes) != 6 {
		t.Fatalf("recorded chunk kinds: %v", shapes)
	}
	return shapes
}

// TestStreamMatchesRecordedDeepSeek compares every kind of chunk the fake
// streams with the same kind in real DeepSeek recordings: same keys, same
// order, same JSON types.
func TestStreamMatchesRecordedDeepSeek(t *testing.T) {
	want := recordedShapes(t)
	s, ts := newServer(t)
	s.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
		Reasoning: "Need the weather.", Content: "Checking.",
		ToolCalls: []fakeupstream.ToolCall{{Name: "weather", Arguments: `{"location":"San Francisco"}`}},
	}})
	resp := post(t, nil, nil, ts.URL+"/chat/completions", streamReq)
	seen := map[string]bool{}
	for _, d := range dataOf(mustEvents(t, resp.Body)) {
		k := chunkKind(d)
		seen[k] = true
		if got := shape(d); !reflect.DeepEqual(got, want[k]) {
			t.Errorf("%s chunk shape\n got %v\nwant %v", k, got, want[k])
		}
	}
	if len(seen) != 6 {
		t.Errorf("chunk kinds streamed: %v", seen)
	}
}

func TestNonStreamMatchesRecordedDeepSeek(t *testing.T) {
	raw, err := fixtures.Read("deepseek-reasoner_tool-call_nonstream.vercel-ai.json")
	if err != nil {
		t.Fatal(err)
	}
	s, ts := newServer(t)
	s.Push(fakeupstream.Response{Reply: &fakeupstream.Reply{
		Reasoning: "Need the weather.",
		ToolCalls: []fakeupstream.ToolCall{{Name: "weather", Arguments: `{"location":"San Francisco"}`}},
	}})
	resp := post(t, nil, nil, ts.URL+"/chat/completions", plainReq)
	body := string(readBody(t, resp.Body))
	if got, want := shape(body), shape(string(raw)); !reflect.DeepEqual(got, want) {
		t.Errorf("shape\n got %v\nwant %v", got, want)
	}
	tests := []struct{ path, want string }{
		{"object", "chat.completion"},
		{"choices.0.message.content", ""},
		{"choices.0.message.reasoning_content", "Need the weather."},
		{"choices.0.message.tool_calls.0.function.arguments", `{"location":"San Francisco"}`},
		{"choices.0.finish_reason", "tool_calls"},
	}
	for _, tt := range tests {
		if got := gjson.Get(body, tt.path).String(); got != tt.want {
			t.Errorf("%s = %q, want %q", tt.path, got, tt.want)
		}
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
}

// assembled is a streamed reply put back together.
type assembled struct {
	reasoning, content string
	calls              []fakeupstream.ToolCall
	finish             string
	usage              string
	phases             string // one letter per delta: r, c, t
}

// assemble checks the invariants of a DeepSeek stream and reassembles it.
func assemble(t *testing.T, evs []event, field string) assembled {
	t.Helper()
	if len(evs) < 3 || !evs[len(evs)-1].done {
		t.Fatalf("stream does not end with [DONE]: %d events", len(evs))
	}
	data := dataOf(evs)
	if got := gjson.Get(data[0], "choices.0.delta").Raw; got != `{"role":"assistant","content":null,"`+field+`":""}` {
		t.Errorf("first delta %s", got)
	}
	var a assembled
	id := gjson.Get(data[0], "id").String()
	for i, d := range data[1:] {
		if gjson.Get(d, "id").String() != id {
			t.Errorf("chunk %d has another id", i+1)
		}
		last := i == len(data)-2
		a.addDelta(t, gjson.Get(d, "choices.0.delta"), field, last)
		fr := gjson.Get(d, "choices.0.finish_reason")
		if (fr.Type != gjson.Null) != last {
			t.Errorf("chunk %d: finish_reason %s", i+1, fr.Raw)
		}
		if last {
			a.finish, a.usage = fr.String(), gjson.Get(d, "usage").Raw
		} else if u := gjson.Get(d, "usage"); u.Exists() && u.Type != gjson.Null {
			t.Errorf("chunk %d carries usage", i+1)
		}
	}
	return a
}

func (a *assembled) addDelta(t *testing.T, d gjson.Result, field string, last bool) {
	t.Helper()
	tc := d.Get("tool_calls.0")
	switch {
	case last:
		if d.Raw != `{"content":"",`+`"`+field+`":null}` {
			t.Errorf("final delta %s", d.Raw)
		}
	case tc.Exists():
		a.phases += "t"
		a.addToolFragment(t, tc)
	case d.Get("content").Type == gjson.Null:
		a.phases += "r"
		a.reasoning += d.Get(field).String()
	default:
		a.phases += "c"
		if d.Get(field).Type != gjson.Null {
			t.Errorf("content delta without %s null: %s", field, d.Raw)
		}
		a.content += d.Get("content").String()
	}
}

func (a *assembled) addToolFragment(t *testing.T, tc gjson.Result) {
	t.Helper()
	idx := int(tc.Get("index").Int())
	if tc.Get("id").Exists() {
		if idx != len(a.calls) || tc.Get("type").String() != "function" || tc.Get("function.arguments").Raw != `""` {
			t.Errorf("bad first fragment %s", tc.Raw)
		}
		a.calls = append(a.calls, fakeupstream.ToolCall{ID: tc.Get("id").String(), Name: tc.Get("function.name").String()})
		return
	}
	if idx != len(a.calls)-1 || tc.Get("function.name").Exists() || tc.Get("type").Exists() {
		t.Errorf("bad later fragment %s", tc.Raw)
		return
	}
	a.calls[idx].Arguments += tc.Get("function.arguments").String()
}

func TestStreamShape(t *testing.T) {
	calls := []fakeupstream.ToolCall{
		{Name: "read_file", Arguments: `{"path":"main.go"}`},
		{ID: "call_given", Name: "ls", Arguments: ""},
	}
	tests := []struct {
		name   string
		req    string
		reply  fakeupstream.Reply
		field  string
		phases string
		finish string
		usage  bool
	}{
		{"reasoning content tools", streamReq, fakeupstream.Reply{Reasoning: "Think first.", Content: "Reading.", ToolCalls: calls, ChunkChars: 4}, "reasoning_content", "rrrcc" + "tttttt" + "t", "tool_calls", true},
		{"no usage asked", `{"stream":true}`, fakeupstream.Reply{Reasoning: "abc", Content: "ok"}, "reasoning_content", "rc", "stop", false},
		{"reasoning field", streamReq, fakeupstream.Reply{Reasoning: "abcdefghij", Content: "ok", ReasoningField: "reasoning"}, "reasoning", "rrc", "stop", true},
		{"finish override", streamReq, fakeupstream.Reply{Content: "cut short", FinishReason: "length", ChunkChars: 100}, "reasoning_content", "c", "length", true},
		{"multibyte", streamReq, fakeupstream.Reply{Reasoning: "héllo wörld 🎉🎉", Content: "日本語のテキスト", ChunkChars: 3}, "reasoning_content", "rrrrr" + "ccc", "stop", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ts := newServer(t)
			rp := tt.reply
			s.Push(fakeupstream.Response{Reply: &rp})
			resp := post(t, nil, nil, ts.URL+"/chat/completions", tt.req)
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("Content-Type %q", ct)
			}
			a := assemble(t, mustEvents(t, resp.Body), tt.field)
			if a.reasoning != tt.reply.Reasoning || a.content != tt.reply.Content {
				t.Errorf("reassembled %q / %q", a.reasoning, a.content)
			}
			if a.phases != tt.phases || a.finish != tt.finish {
				t.Errorf("phases %q finish %q, want %q %q", a.phases, a.finish, tt.phases, tt.finish)
			}
			checkCalls(t, a.calls, tt.reply.ToolCalls)
			checkUsage(t, a.usage, tt.usage)
		})
	}
}

func checkCalls(t *testing.T, got, want []fakeupstream.ToolCall) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d tool calls, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Name != want[i].Name || got[i].Arguments != want[i].Arguments {
			t.Errorf("call %d = %+v, want %+v", i, got[i], want[i])
		}
		if want[i].ID != "" && got[i].ID != want[i].ID || !strings.HasPrefix(got[i].ID, "call_") {
			t.Errorf("call %d id %q", i, got[i].ID)
		}
	}
}

func checkUsage(t *testing.T, raw string, want bool) {
	t.Helper()
	if !want {
		if raw != "" {
			t.Errorf("usage %s not asked for", raw)
		}
		return
	}
	u := gjson.Parse(raw)
	p, c := u.Get("prompt_tokens").Int(), u.Get("completion_tokens").Int()
	if p < 1 || c < 1 || u.Get("total_tokens").Int() != p+c || !u.Get("prompt_cache_miss_tokens").Exists() {
		t.Errorf("usage %s", raw)
	}
}

func TestRenderMatchesServer(t *testing.T) {
	rp := fakeupstream.Reply{Reasoning: "r", Content: "c", Usage: &fakeupstream.Usage{PromptTokens: 10, CompletionTokens: 2, ReasoningTokens: 1}}
	tests := []struct {
		name, req string
		want      []byte
	}{
		{"stream", streamReq, fakeupstream.RenderStream([]byte(streamReq), rp)},
		{"json", `{"messages":[]}`, fakeupstream.RenderJSON(rp)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, ts := newServer(t)
			s.Push(fakeupstream.Response{Reply: &rp})
			if got := readBody(t, post(t, nil, nil, ts.URL+"/chat/completions", tt.req).Body); string(got) != string(tt.want) {
				t.Errorf("server sent\n%s\nrender gave\n%s", got, tt.want)
			}
		})
	}
}

func TestRenderDeterministic(t *testing.T) {
	rp := fakeupstream.Reply{Reasoning: "same", Content: "bytes", ToolCalls: []fakeupstream.ToolCall{{Name: "f", Arguments: "{}"}}}
	if a, b := fakeupstream.RenderStream([]byte(streamReq), rp), fakeupstream.RenderStream([]byte(streamReq), rp); string(a) != string(b) {
		t.Error("RenderStream differs between calls")
	}
	if a, b := fakeupstream.RenderJSON(rp), fakeupstream.RenderJSON(rp); string(a) != string(b) || !gjson.ValidBytes(a) {
		t.Error("RenderJSON differs between calls or is invalid")
	}
}

func TestChunkCharsNeverSplitsUTF8(t *testing.T) {
	text := "aé日🎉b\u0301c" + strings.Repeat("ß", 5)
	for n := 1; n <= 6; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			body := fakeupstream.RenderStream([]byte(streamReq), fakeupstream.Reply{Content: text, ChunkChars: n})
			evs := mustEvents(t, strings.NewReader(string(body)))
			var got string
			for _, d := range dataOf(evs) {
				c := gjson.Get(d, "choices.0.delta.content")
				if c.Type != gjson.String {
					continue
				}
				if !utf8.ValidString(c.String()) || utf8.RuneCountInString(c.String()) > n {
					t.Errorf("piece %q", c.String())
				}
				got += c.String()
			}
			if got != text {
				t.Errorf("reassembled %q, want %q", got, text)
			}
		})
	}
}

func ExampleRenderJSON() {
	body := fakeupstream.RenderJSON(fakeupstream.Reply{Reasoning: "Easy.", Content: "4"})
	fmt.Println(gjson.GetBytes(body, "choices.0.message.reasoning_content"), gjson.GetBytes(body, "choices.0.message.content"))
	fmt.Println(gjson.GetBytes(body, "id"), gjson.GetBytes(body, "choices.0.finish_reason"))
	// Output:
	// Easy. 4
	// 00000000-0000-4000-8000-000000000001 stop
}
