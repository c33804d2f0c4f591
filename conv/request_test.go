package conv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/tidwall/gjson"
)

// multiturn holds the three real DeepSeek requests of one conversation
// (see testdata/PROVENANCE.md).
var multiturn = []string{
	"deepseek-v4-flash_multiturn.request1.json",
	"deepseek-v4-flash_multiturn.request2.json",
	"deepseek-v4-flash_multiturn.request3.json",
}

func TestParseRequestDeepSeekMultiturn(t *testing.T) {
	wantRoles := [][]string{
		{"system", "system", "user"},
		{"system", "system", "user", "assistant", "tool", "assistant", "tool"},
		{"system", "system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool", "tool"},
	}
	for n, name := range multiturn {
		t.Run(name, func(t *testing.T) {
			body := readTestdata(t, name)
			r, err := ParseRequest(body)
			if err != nil {
				t.Fatal(err)
			}
			if r.Model != "deepseek-reasoner" || r.Stream || r.DuplicateKeys {
				t.Errorf("Model, Stream, DuplicateKeys = %q, %v, %v", r.Model, r.Stream, r.DuplicateKeys)
			}
			var roles []string
			for _, m := range r.Messages {
				roles = append(roles, m.Role)
			}
			if !reflect.DeepEqual(roles, wantRoles[n]) {
				t.Fatalf("roles = %v, want %v", roles, wantRoles[n])
			}
			checkAgainstDecoded(t, r)
		})
	}
}

// checkAgainstDecoded compares every message of r with an independent
// encoding/json decoding of its body, and checks every byte range.
func checkAgainstDecoded(t *testing.T, r *Request) {
	t.Helper()
	doc := decodeAny(t, r.Body).(map[string]any)
	raw := doc["messages"].([]any)
	if len(raw) != len(r.Messages) {
		t.Fatalf("%d messages, decoded %d", len(r.Messages), len(raw))
	}
	for i, m := range r.Messages {
		want := raw[i].(map[string]any)
		if m.Index != i {
			t.Errorf("message %d: Index = %d", i, m.Index)
		}
		if got := decodeAny(t, r.Body[m.Start:m.End]); !reflect.DeepEqual(got, want) {
			t.Errorf("message %d: Body[Start:End] decodes to %v, want %v", i, got, want)
		}
		checkReasoning(t, r, m, want)
		if c, ok := want["content"].(string); ok && (m.Content != c || !m.ContentIsString) {
			t.Errorf("message %d: Content = %q, want %q", i, m.Content, c)
		}
		if id, _ := want["tool_call_id"].(string); m.ToolCallID != id {
			t.Errorf("message %d: ToolCallID = %q, want %q", i, m.ToolCallID, id)
		}
		checkToolCalls(t, m, want)
	}
}

// checkReasoning compares the reasoning of m with the decoded message want.
func checkReasoning(t *testing.T, r *Request, m Message, want map[string]any) {
	t.Helper()
	rc, has := want["reasoning_content"]
	if m.HasReasoningKey != has {
		t.Fatalf("message %d: HasReasoningKey = %v, want %v", m.Index, m.HasReasoningKey, has)
	}
	if !has {
		if m.ReasoningField != "" || m.ReasoningStart != -1 || m.ReasoningEnd != -1 {
			t.Errorf("message %d: reasoning without key: %q %d %d", m.Index, m.ReasoningField, m.ReasoningStart, m.ReasoningEnd)
		}
		return
	}
	if m.ReasoningField != "reasoning_content" || m.Reasoning != rc.(string) {
		t.Errorf("message %d: %s = %q, want reasoning_content = %q", m.Index, m.ReasoningField, m.Reasoning, rc)
	}
	var dec string
	if err := json.Unmarshal(r.Body[m.ReasoningStart:m.ReasoningEnd], &dec); err != nil || dec != m.Reasoning {
		t.Errorf("message %d: Body[ReasoningStart:ReasoningEnd] = %q (%v), want %q", m.Index, r.Body[m.ReasoningStart:m.ReasoningEnd], err, m.Reasoning)
	}
}

// checkToolCalls compares the tool calls of m with the decoded message want.
func checkToolCalls(t *testing.T, m Message, want map[string]any) {
	t.Helper()
	calls, _ := want["tool_calls"].([]any)
	if len(calls) != len(m.ToolCalls) {
		t.Fatalf("message %d: %d tool calls, want %d", m.Index, len(m.ToolCalls), len(calls))
	}
	for j, c := range calls {
		c := c.(map[string]any)
		f := c["function"].(map[string]any)
		w := ToolCall{Index: j, ID: c["id"].(string), Type: c["type"].(string), Name: f["name"].(string), Arguments: f["arguments"].(string)}
		if m.ToolCalls[j] != w {
			t.Errorf("message %d call %d = %+v, want %+v", m.Index, j, m.ToolCalls[j], w)
		}
	}
}

func TestParseRequestDeepSeekReasoningValues(t *testing.T) {
	r, err := ParseRequest(readTestdata(t, multiturn[2]))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		i         int
		reasoning string
		rangeText string
	}{
		{3, "The user wants to play a dice game. I need to roll a die and compare it to the user's guess of 4. But the DICE_ROLL capability is deferred - I need to load it first using the `load_capability` tool.\n\nLet me load the capability first.", ""},
		{5, "", `""`},
		{7, "Great, now I have access to the dice roll tool. Let me first get the player's name and then roll the die.", ""},
	}
	for _, tt := range tests {
		m := r.Messages[tt.i]
		if m.Reasoning != tt.reasoning || m.Signed {
			t.Errorf("message %d: Reasoning = %q, Signed = %v", tt.i, m.Reasoning, m.Signed)
		}
		if got := string(r.Body[m.ReasoningStart:m.ReasoningEnd]); tt.rangeText != "" && got != tt.rangeText {
			t.Errorf("message %d: range text = %q, want %q", tt.i, got, tt.rangeText)
		}
	}
	if m := r.Messages[5]; m.Content != "" || m.ContentIsString {
		t.Errorf("null content: Content = %q, ContentIsString = %v", m.Content, m.ContentIsString)
	}
}

// TestReasoningRangeEdit replaces every reasoning value through its byte
// range, the way shaping edits in place, and checks the result.
func TestReasoningRangeEdit(t *testing.T) {
	r, err := ParseRequest(readTestdata(t, multiturn[2]))
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	last := 0
	for _, m := range r.Messages {
		if m.ReasoningStart >= 0 {
			out = append(out, r.Body[last:m.ReasoningStart]...)
			out = append(out, `"shaped \"x\""`...)
			last = m.ReasoningEnd
		}
	}
	out = append(out, r.Body[last:]...)
	r2, err := ParseRequest(out)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range r2.Messages {
		if m.HasReasoningKey && m.Reasoning != `shaped "x"` {
			t.Errorf("message %d: Reasoning = %q after edit", i, m.Reasoning)
		}
		if m.Content != r.Messages[i].Content || m.Role != r.Messages[i].Role {
			t.Errorf("message %d changed beyond its reasoning", i)
		}
	}
}

func TestParseRequestNotChat(t *testing.T) {
	tests := []struct{ name, body string }{
		{"empty", ""},
		{"invalid json", `{"messages": [}`},
		{"trailing garbage", `{"messages": []} x`},
		{"array", `[{"role":"user"}]`},
		{"string", `"messages"`},
		{"no messages", `{"model":"m"}`},
		{"messages object", `{"messages":{"role":"user"}}`},
		{"messages null", `{"messages":null}`},
		{"invalid utf-8", "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}"},
		{"last messages not array", `{"messages":[],"messages":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRequest([]byte(tt.body))
			if !errors.Is(err, ErrNotChat) || r != nil {
				t.Errorf("ParseRequest = %v, %v; want ErrNotChat", r, err)
			}
		})
	}
}

func TestParseRequestTopLevel(t *testing.T) {
	tests := []struct {
		body   string
		model  string
		stream bool
		n      int
		dup    bool
	}{
		{`{"messages":[]}`, "", false, 0, false},
		{` {"model":"deepseek-chat","stream":true,"messages":[{"role":"user","content":"hi"}]} `, "deepseek-chat", true, 1, false},
		{`{"model":1,"stream":"true","messages":[1,"x",null]}`, "", false, 3, false},
		{`{"model":"a","model":"b","messages":[]}`, "b", false, 0, true},
		{`{"messages":[{"role":"user","role":"assistant"}]}`, "", false, 1, true},
	}
	for _, tt := range tests {
		r := mustParse(t, tt.body)
		if r.Model != tt.model || r.Stream != tt.stream || len(r.Messages) != tt.n || r.DuplicateKeys != tt.dup {
			t.Errorf("%s: Model %q Stream %v len %d dup %v; want %q %v %d %v", tt.body,
				r.Model, r.Stream, len(r.Messages), r.DuplicateKeys, tt.model, tt.stream, tt.n, tt.dup)
		}
	}
}

func TestNonObjectMessage(t *testing.T) {
	body := `{"messages":[ "x" , {"role":"user","content":"hi"}]}`
	r := mustParse(t, body)
	m := r.Messages[0]
	if m.Role != "" || body[m.Start:m.End] != `"x"` || m.ReasoningStart != -1 {
		t.Errorf("non-object message = %+v", m)
	}
	if got := body[r.Messages[1].Start:r.Messages[1].End]; got != `{"role":"user","content":"hi"}` {
		t.Errorf("message 1 range = %q", got)
	}
}

func TestDuplicateKeyLastWins(t *testing.T) {
	body := `{"messages":[{"role":"assistant","reasoning_content":"first","reasoning_content":"last"}]}`
	r := mustParse(t, body)
	m := r.Messages[0]
	if m.Reasoning != "last" || body[m.ReasoningStart:m.ReasoningEnd] != `"last"` || !r.DuplicateKeys {
		t.Errorf("Reasoning = %q, range %q, dup %v", m.Reasoning, body[m.ReasoningStart:m.ReasoningEnd], r.DuplicateKeys)
	}
}

func TestReasoningField(t *testing.T) {
	tests := []struct {
		name, msg  string
		field      string
		reasoning  string
		hasKey     bool
		rangeToken string // "" means no range
	}{
		{"none", `{"role":"assistant","content":"x"}`, "", "", false, ""},
		{"reasoning_content", `{"role":"assistant","reasoning_content":"think"}`, "reasoning_content", "think", true, `"think"`},
		{"reasoning", `{"role":"assistant","reasoning":"think"}`, "reasoning", "think", true, `"think"`},
		{"empty string", `{"role":"assistant","reasoning_content":""}`, "reasoning_content", "", true, `""`},
		{"null", `{"role":"assistant","reasoning_content":null}`, "reasoning_content", "", true, ""},
		{"object", `{"role":"assistant","reasoning":{"effort":"high"}}`, "reasoning", "", true, ""},
		{"both strings", `{"role":"assistant","reasoning":"b","reasoning_content":"a"}`, "reasoning_content", "a", true, `"a"`},
		{"rc null, reasoning string", `{"role":"assistant","reasoning_content":null,"reasoning":"b"}`, "reasoning", "b", true, `"b"`},
		{"rc string, reasoning null", `{"role":"assistant","reasoning":null,"reasoning_content":"a"}`, "reasoning_content", "a", true, `"a"`},
		{"both null", `{"role":"assistant","reasoning":null,"reasoning_content":null}`, "reasoning_content", "", true, ""},
		{"escapes", `{"role":"assistant","reasoning_content" : "a\"b\\c\u00e9\ud83d\ude00\n"}`, "reasoning_content", "a\"b\\cé😀\n", true, `"a\"b\\c\u00e9\ud83d\ude00\n"`},
		{"escaped key", `{"role":"assistant","reasoning\u005fcontent":"k"}`, "reasoning_content", "k", true, `"k"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := `{"messages": [` + tt.msg + `]}`
			m := mustParse(t, body).Messages[0]
			if m.ReasoningField != tt.field || m.Reasoning != tt.reasoning || m.HasReasoningKey != tt.hasKey {
				t.Errorf("got %q %q %v, want %q %q %v", m.ReasoningField, m.Reasoning, m.HasReasoningKey, tt.field, tt.reasoning, tt.hasKey)
			}
			got := ""
			if m.ReasoningStart >= 0 {
				got = body[m.ReasoningStart:m.ReasoningEnd]
			} else if m.ReasoningEnd != -1 {
				t.Errorf("ReasoningEnd = %d with ReasoningStart -1", m.ReasoningEnd)
			}
			if got != tt.rangeToken {
				t.Errorf("range = %q, want %q", got, tt.rangeToken)
			}
		})
	}
}

func TestSigned(t *testing.T) {
	tests := []struct {
		name, msg string
		want      bool
	}{
		{"plain", `{"role":"assistant","content":"x","reasoning_content":"r"}`, false},
		{"openrouter reasoning_details", `{"role":"assistant","content":"","reasoning":"r","reasoning_details":[{"type":"reasoning.encrypted","data":"gAAA","index":0}]}`, true},
		{"empty reasoning_details", `{"role":"assistant","reasoning":"r","reasoning_details":[]}`, false},
		{"null reasoning_details", `{"role":"assistant","reasoning":"r","reasoning_details":null}`, false},
		{"thinking_blocks", `{"role":"assistant","thinking_blocks":[{"type":"thinking","thinking":"t","signature":"s"}]}`, true},
		{"thinking part", `{"role":"assistant","content":[{"type":"thinking","thinking":"t"}]}`, true},
		{"redacted_thinking part", `{"role":"assistant","content":[{"type":"redacted_thinking","data":"d"}]}`, true},
		{"part with signature", `{"role":"assistant","content":[{"type":"text","text":"t","signature":"s"}]}`, true},
		{"part with null signature", `{"role":"assistant","content":[{"type":"text","text":"t","signature":null}]}`, false},
		{"encrypted_content part", `{"role":"assistant","content":[{"type":"reasoning","encrypted_content":"e"}]}`, true},
		{"message encrypted_content", `{"role":"assistant","encrypted_content":"e"}`, true},
		{"gemini thought_signature", `{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"},"extra_content":{"google":{"thought_signature":"sig"}}}]}`, true},
		{"extra_content without signature", `{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f"},"extra_content":{"google":{}}}]}`, false},
		{"text parts only", `{"role":"user","content":[{"type":"text","text":"t"}]}`, false},
		// A repeated key is read last-wins, as the rest of the view reads
		// it (and as last-wins parsers do upstream).
		{"part with a repeated signature", `{"role":"assistant","content":[{"type":"text","text":"t","signature":null,"signature":"s"}]}`, true},
		{"tool call with a repeated holder", `{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f"},"extra_content":{},"extra_content":{"google":{"thought_signature":"sig"}}}]}`, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustParse(t, `{"messages":[`+tt.msg+`]}`).Messages[0]
			if m.Signed != tt.want {
				t.Errorf("Signed = %v, want %v", m.Signed, tt.want)
			}
		})
	}
}

// TestSignedAnthropicCapture uses a real request that replays a signed
// Anthropic thinking block.
func TestSignedAnthropicCapture(t *testing.T) {
	r, err := ParseRequest(readTestdata(t, "anthropic_tool-use-with-thinking.request2.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got []bool
	for _, m := range r.Messages {
		got = append(got, m.Signed)
	}
	if want := []bool{false, true, false}; !reflect.DeepEqual(got, want) {
		t.Errorf("Signed = %v, want %v", got, want)
	}
	want := "I'll help you find the largest city in your country. First, let me determine which country you're from."
	if r.Messages[1].Content != want || r.Messages[1].HasReasoningKey {
		t.Errorf("assistant Content = %q, HasReasoningKey = %v", r.Messages[1].Content, r.Messages[1].HasReasoningKey)
	}
}

func TestContent(t *testing.T) {
	tests := []struct {
		name, content string
		text          string
		isString      bool
		images        int
	}{
		{"string", `"hello"`, "hello", true, 0},
		{"empty string", `""`, "", true, 0},
		{"null", `null`, "", false, 0},
		{"text and images", `[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA"}},{"type":"text","text":"and this"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]`, "look\nand this", false, 2},
		{"responses style parts", `[{"type":"input_text","text":"a"},{"type":"input_image","image_url":"u"},{"type":"image","source":{}}]`, "a", false, 2},
		{"non-text parts ignored", `[{"type":"input_audio","input_audio":{}},{"type":"text","text":1},{"text":"untyped"},"x"]`, "", false, 0},
		{"object", `{"type":"text","text":"t"}`, "", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := mustParse(t, `{"messages":[{"role":"user","content":`+tt.content+`}]}`).Messages[0]
			if m.Content != tt.text || m.ContentIsString != tt.isString || m.Images != tt.images {
				t.Errorf("got %q %v %d, want %q %v %d", m.Content, m.ContentIsString, m.Images, tt.text, tt.isString, tt.images)
			}
		})
	}
}

func TestToolCallsAndNames(t *testing.T) {
	body := `{"messages":[
	  {"role":"assistant","name":"bot","tool_calls":[
	    {"id":"a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}},
	    {"index":5,"id":"b","type":"function","function":{"name":"g","arguments":{"y":2}}},
	    "junk"]},
	  {"role":"tool","tool_call_id":"a","content":"ok"}]}`
	r := mustParse(t, body)
	want := []ToolCall{
		{Index: 0, ID: "a", Type: "function", Name: "f", Arguments: `{"x":1}`},
		{Index: 5, ID: "b", Type: "function", Name: "g", Arguments: `{"y":2}`},
		{Index: 2},
	}
	if got := r.Messages[0].ToolCalls; !reflect.DeepEqual(got, want) {
		t.Errorf("ToolCalls = %+v, want %+v", got, want)
	}
	if r.Messages[0].Name != "bot" || r.Messages[1].ToolCallID != "a" {
		t.Errorf("Name %q ToolCallID %q", r.Messages[0].Name, r.Messages[1].ToolCallID)
	}
	if !strings.HasPrefix(body[r.Messages[1].Start:], `{"role":"tool"`) {
		t.Errorf("tool message range starts at %q", body[r.Messages[1].Start:])
	}
}

// TestContentRange: a message's content range is its "content" value as
// written (quotes, spaces inside an array, null), -1 without one, for a
// fresh parse and for the Reparser's view that reuses the messages.
func TestContentRange(t *testing.T) {
	first := []byte(`{"messages":[{"role":"user","content":"caf\u00e9 \"x\""},{"role":"tool","tool_call_id":"a","content":[ {"type":"text","text":"p"} ]},{"role":"assistant","content":null,"reasoning_content":"r"},{"role":"tool","tool_call_id":"b"}]}`)
	next := []byte(`{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \"x\""},{"role":"tool","tool_call_id":"a","content":[ {"type":"text","text":"p"} ]},{"role":"assistant","content":null,"reasoning_content":"r"},{"role":"tool","tool_call_id":"b"},{"role":"user","content": "more"}]}`)
	check := func(r *Request) {
		t.Helper()
		for i, m := range r.Messages {
			want := gjson.GetBytes(r.Body, fmt.Sprintf("messages.%d.content", i))
			switch {
			case !want.Exists():
				if m.ContentStart != -1 || m.ContentEnd != -1 {
					t.Errorf("message %d: range %d:%d without content", i, m.ContentStart, m.ContentEnd)
				}
			case m.ContentStart < 0 || string(r.Body[m.ContentStart:m.ContentEnd]) != want.Raw:
				t.Errorf("message %d: range %d:%d, want the value %s", i, m.ContentStart, m.ContentEnd, want.Raw)
			}
		}
	}
	r, err := ParseRequest(first)
	if err != nil {
		t.Fatal(err)
	}
	check(r)
	rp := NewReparser(1 << 20)
	if _, err := rp.Parse(first); err != nil {
		t.Fatal(err)
	}
	again, err := rp.Parse(next)
	if err != nil {
		t.Fatal(err)
	}
	check(again)
}

// TestRolesInterned: the roles the package names are its own strings, not
// bytes of the body, in a view parsed, one read against an earlier
// request and one derived by Apply: the passes over a history compare
// roles without reading the body. Another role is the client's string.
func TestRolesInterned(t *testing.T) {
	body := []byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},` +
		`{"role":"assistant","reasoning_content":"Okay, let me think about the question at length before answering it.","content":"a"},` +
		`{"role":"tool","tool_call_id":"c","content":"r"},{"role":"developer","content":"d"},{"role":"critic","content":"x"}]}`)
	same := func(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }
	// from is the body the view's strings are read from (a derived view's
	// unchanged messages keep those of the view it was derived from).
	check := func(name string, v *Request, from []byte) {
		t.Helper()
		for i, want := range []string{RoleSystem, RoleUser, RoleAssistant, RoleTool, RoleDeveloper} {
			if m := v.Messages[i]; m.Role != want || !same(m.Role, want) {
				t.Errorf("%s: message %d's role %q is not the package's %q", name, i, m.Role, want)
			}
		}
		body := uintptr(unsafe.Pointer(unsafe.SliceData(from)))
		if m := v.Messages[5]; m.Role != "critic" || uintptr(unsafe.Pointer(unsafe.StringData(m.Role))) < body ||
			uintptr(unsafe.Pointer(unsafe.StringData(m.Role))) >= body+uintptr(len(from)) {
			t.Errorf("%s: another role read as %q, not the body's bytes", name, m.Role)
		}
	}
	v, err := ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	check("ParseRequest", v, v.Body)
	rp := NewReparser(1 << 20)
	if _, err := rp.Parse(bytes.Clone(body)); err != nil {
		t.Fatal(err)
	}
	again, err := rp.Parse(bytes.Clone(body))
	if err != nil || again.reused != len(again.Messages) {
		t.Fatalf("read against the first: err %v, %d of %d messages reused", err, again.reused, len(again.Messages))
	}
	check("Reparser", again, again.Body)
	m := &again.Messages[2]
	d, err := again.Apply([]Edit{QuoteString("Short.").Replace(m.ReasoningStart, m.ReasoningEnd)})
	if err != nil {
		t.Fatal(err)
	}
	check("Apply", d, again.Body)
}
