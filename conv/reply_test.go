package conv

import (
	"testing"

	"github.com/tidwall/gjson"
)

// TestChoiceMessage: the message reads back as the choice it came from,
// through the request parser and through gjson; the reasoning key is there
// (empty too) only when the field is named, tool_calls only with calls.
func TestChoiceMessage(t *testing.T) {
	c := Choice{
		ReasoningField: "reasoning",
		Reasoning:      "line one\n\"quoted\" <tag> & é \x01",
		Content:        "",
		ToolCalls: []ToolCall{
			{ID: "call_1", Name: "bash", Arguments: `{"cmd":"go test ./..."}`},
			{ID: "call_2", Type: "custom", Name: "x", Arguments: ""},
		},
	}
	msg := c.Message()
	if !ValidJSON(msg) {
		t.Fatalf("not JSON: %s", msg)
	}
	req, err := ParseRequest(append(append([]byte(`{"model":"m","messages":[`), msg...), "]}"...))
	if err != nil {
		t.Fatal(err)
	}
	m := req.Messages[0]
	if m.Role != "assistant" || m.ReasoningField != "reasoning" || m.Reasoning != c.Reasoning || !m.HasReasoningKey || m.Content != "" || !m.ContentIsString {
		t.Fatalf("read back %+v", m)
	}
	calls := gjson.GetBytes(msg, "tool_calls").Array()
	if len(calls) != 2 || calls[0].Get("type").Str != "function" || calls[1].Get("type").Str != "custom" ||
		calls[0].Get("function.arguments").Str != c.ToolCalls[0].Arguments || calls[1].Get("id").Str != "call_2" {
		t.Fatalf("tool_calls %s", gjson.GetBytes(msg, "tool_calls").Raw)
	}

	empty := Choice{ReasoningField: "reasoning_content", Content: "hi"}.Message()
	if string(empty) != `{"role":"assistant","content":"hi","reasoning_content":""}` {
		t.Fatalf("empty reasoning: %s", empty)
	}
	if none := (Choice{Content: "hi"}).Message(); string(none) != `{"role":"assistant","content":"hi"}` {
		t.Fatalf("no field: %s", none)
	}
}
