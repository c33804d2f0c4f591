package conv

import "github.com/shaperproxy/shaperproxy/internal/jsonstr"

// Message returns c as the assistant message a client puts back in its
// history: {"role":"assistant","content":…,"<field>":…,"tool_calls":[…]}.
// The reasoning key is c.ReasoningField, present (possibly "") when it is
// set, so a DeepSeek-style upstream finds the reasoning under the key it
// sent it (PROTOCOLS.md rules 1 and 3); tool_calls is present only when
// there are calls, a call without a type given "function".
func (c Choice) Message() []byte {
	b := jsonstr.Append([]byte(`{"role":"assistant","content":`), c.Content)
	if c.ReasoningField != "" {
		b = jsonstr.Append(append(b, ','), c.ReasoningField)
		b = jsonstr.Append(append(b, ':'), c.Reasoning)
	}
	if len(c.ToolCalls) > 0 {
		b = append(b, `,"tool_calls":[`...)
		for i, tc := range c.ToolCalls {
			if i > 0 {
				b = append(b, ',')
			}
			typ := tc.Type
			if typ == "" {
				typ = "function"
			}
			b = jsonstr.Append(append(b, `{"id":`...), tc.ID)
			b = jsonstr.Append(append(b, `,"type":`...), typ)
			b = jsonstr.Append(append(b, `,"function":{"name":`...), tc.Name)
			b = jsonstr.Append(append(b, `,"arguments":`...), tc.Arguments)
			b = append(b, "}}"...)
		}
		b = append(b, ']')
	}
	return append(b, '}')
}
