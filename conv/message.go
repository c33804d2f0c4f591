package conv

import (
	"strings"

	"github.com/tidwall/gjson"
)

// Message is the view of one element of a request's "messages" array.
//
// An element that is not a JSON object still gets a Message (so that
// Messages[i] is always array element i) with an empty Role.
type Message struct {
	// Index is the position of the message in the messages array.
	Index int
	// Role is the "role" string: "system", "developer", "user",
	// "assistant", "tool", or anything else the client sent.
	Role string
	// Start and End delimit the message's JSON value within Request.Body.
	Start, End int
	// key is RawKeyOf the message's bytes (Body[Start:End]), computed
	// when they are read and carried with the message when it moves (the
	// Reparser, Apply): readers that key or hash whole messages (the
	// capture's blobs, the guard's prefix check, the shaper's memo and
	// print memo, where a wrong key would change what goes upstream) use
	// it instead of hashing a history again on every request. It lies
	// next to Start and End, in their cache line: a loop over a long
	// history's messages that reads the three (the capture's spans, a
	// prefix check) takes one line of each message, not two.
	key RawKey
	// Name is the optional "name" string.
	Name string

	// ReasoningField is the plain reasoning key present on the message:
	// "reasoning_content", "reasoning", or "" when neither is. When both
	// are present, the one holding a string wins; when both (or neither)
	// hold a string, "reasoning_content" wins.
	ReasoningField string
	// Reasoning is the decoded string value of ReasoningField ("" when
	// the value is not a string).
	Reasoning string
	// ReasoningStart and ReasoningEnd delimit, within Request.Body, the
	// JSON string token (quotes included) of the reasoning value. Both
	// are -1 when the key is absent or its value is not a string (null).
	ReasoningStart, ReasoningEnd int
	// HasReasoningKey is true when ReasoningField is present, even with
	// the value "" or null.
	HasReasoningKey bool
	// Signed is true when the message carries signed or encrypted
	// reasoning that must pass byte for byte (PROTOCOLS.md rule 2):
	// a non-empty "reasoning_details" or "thinking_blocks" array; a
	// non-null "signature", "encrypted_content", "thought_signature" or
	// "thought_signatures" on the message, on a content part or on a tool
	// call; a non-empty "thought_signature(s)" at any depth of their
	// "extra_content" or "provider_specific_fields" (another key there,
	// such as an e-mail's "signature", is none); or a content part of
	// type "thinking", "redacted_thinking" or "reasoning".
	Signed bool

	// Content is the visible text: the string content, or the text of the
	// content parts of type "text", "input_text" or "output_text" joined
	// with "\n".
	Content string
	// ContentIsString is true when "content" is a JSON string.
	ContentIsString bool
	// ContentStart and ContentEnd delimit, within Request.Body, the JSON
	// value of "content" (a string token with its quotes, an array of
	// parts, null…), so a reader can tell its kind or edit it without
	// decoding it again. Both are -1 when the message has no "content".
	ContentStart, ContentEnd int
	// Images counts content parts of type "image_url", "input_image" or
	// "image".
	Images int
	// ToolCalls are the message's "tool_calls" (assistant messages carry
	// them), in array order.
	ToolCalls []ToolCall
	// ToolCallID is the "tool_call_id" string (role "tool").
	ToolCallID string

	dup bool // the message object repeats a key
}

// RawKey returns RawKeyOf(Body[m.Start:m.End]) of the message's request.
func (m *Message) RawKey() RawKey { return m.key }

// ToolCall is one tool call of an assistant message or of a response.
type ToolCall struct {
	// Index is the call's "index" field when present (streams, some
	// bodies), otherwise its position in the tool_calls array.
	Index int
	// ID, Type and Name are "id", "type" and "function.name".
	ID, Type, Name string
	// Arguments is "function.arguments": the decoded string, or the raw
	// JSON when a client sent an object.
	Arguments string
}

// messageKeys are the message keys the view reads.
var messageKeys = append([]string{
	"role", "name", "content", "tool_calls", "tool_call_id",
	"reasoning_details", "thinking_blocks",
	"signature", "encrypted_content", "thought_signature", "thought_signatures",
	"extra_content", "provider_specific_fields",
}, ReasoningFields[:]...)

// parseMessage builds the view of messages element i.
func parseMessage(i int, v gjson.Result, dup *bool) Message {
	m := Message{
		Index: i, Start: v.Index, End: v.Index + len(v.Raw),
		ReasoningStart: -1, ReasoningEnd: -1, ContentStart: -1, ContentEnd: -1,
		key: rawKeyString(v.Raw),
	}
	if !v.IsObject() {
		return m
	}
	k := lastKeys(v, &m.dup, messageKeys...)
	*dup = *dup || m.dup
	m.Role = internRole(str(k.get("role")))
	m.Name = str(k.get("name"))
	m.ToolCallID = str(k.get("tool_call_id"))
	var rs [len(ReasoningFields)]gjson.Result
	for i, f := range ReasoningFields {
		rs[i] = k.get(f)
	}
	m.setReasoning(rs)
	m.setContent(k.get("content"))
	m.ToolCalls = parseToolCalls(k.get("tool_calls"))
	m.Signed = messageSigned(&k) || partsSigned(k.get("content")) || toolCallsSigned(k.get("tool_calls"))
	return m
}

// internRole returns the package's own string for the roles it names:
// every pass over a history compares roles, and a role that is bytes of
// the body is a read of the body — a cache line a message, which a long
// history's passes after the parse find cold — where the constants stay
// in the cache. Any other role is returned as it is.
func internRole(r string) string {
	switch r {
	case RoleUser:
		return RoleUser
	case RoleAssistant:
		return RoleAssistant
	case RoleTool:
		return RoleTool
	case RoleSystem:
		return RoleSystem
	case RoleDeveloper:
		return RoleDeveloper
	}
	return r
}

// setReasoning picks the reasoning field (see Message.ReasoningField) and
// records its value and byte range. rs holds each of ReasoningFields.
func (m *Message) setReasoning(rs [len(ReasoningFields)]gjson.Result) {
	i := pickReasoning(rs, -1)
	if i < 0 {
		return
	}
	v := rs[i]
	m.ReasoningField, m.HasReasoningKey = ReasoningFields[i], true
	if v.Type == gjson.String {
		m.Reasoning = v.Str
		m.ReasoningStart, m.ReasoningEnd = v.Index, v.Index+len(v.Raw)
	}
}

// setContent records the visible text and image count of content, and
// its byte range.
func (m *Message) setContent(c gjson.Result) {
	if c.Exists() && c.Index > 0 {
		m.ContentStart, m.ContentEnd = c.Index, c.Index+len(c.Raw)
	}
	if c.Type == gjson.String {
		m.Content, m.ContentIsString = c.Str, true
		return
	}
	m.Content, m.Images = partsText(c)
}

// partsText joins the text parts of a content array with "\n" and counts
// its image parts.
func partsText(parts gjson.Result) (string, int) {
	var texts []string
	images := 0
	forEachElem(parts, func(_, p gjson.Result) bool {
		switch str(p.Get("type")) {
		case "text", "input_text", "output_text":
			if t := p.Get("text"); t.Type == gjson.String {
				texts = append(texts, t.Str)
			}
		case "image_url", "input_image", "image":
			images++
		}
		return true
	})
	return strings.Join(texts, "\n"), images
}

// parseToolCalls reads a tool_calls array, stopping past MaxToolCalls
// calls (the request is then refused).
func parseToolCalls(arr gjson.Result) []ToolCall {
	var calls []ToolCall
	forEachElem(arr, func(_, c gjson.Result) bool {
		tc := ToolCall{
			Index:     len(calls),
			ID:        str(c.Get("id")),
			Type:      str(c.Get("type")),
			Name:      str(c.Get("function.name")),
			Arguments: arguments(c.Get("function.arguments")),
		}
		if n := c.Get("index"); n.Type == gjson.Number {
			tc.Index = int(n.Int())
		}
		calls = append(calls, tc)
		return len(calls) <= MaxToolCalls
	})
	return calls
}

// arguments returns a string's decoded value, the raw JSON of an object or
// array, and "" for anything else.
func arguments(a gjson.Result) string {
	switch {
	case a.Type == gjson.String:
		return a.Str
	case a.IsObject() || a.IsArray():
		return a.Raw
	}
	return ""
}

// str returns the decoded value of a JSON string, or "" for any other type.
func str(r gjson.Result) string {
	if r.Type == gjson.String {
		return r.Str
	}
	return ""
}

// forEachElem calls fn for each element of v when v is an array (the key
// holds the position in Num) and does nothing otherwise.
func forEachElem(v gjson.Result, fn func(k, e gjson.Result) bool) {
	if v.IsArray() {
		v.ForEach(fn)
	}
}
