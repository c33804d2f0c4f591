package review

import (
	"github.com/shaperproxy/shaperproxy/conv"
)

// Draft is one assistant response as the upstream produced it: the answer
// the model was about to end its turn with (the draft), or the
// continuation it wrote after the review notice. Build it from the
// assembled response with DraftOf.
type Draft struct {
	// ReasoningField is the key the upstream sent the reasoning under
	// ("reasoning_content" or "reasoning"), or "" when it sent none. The
	// message built from the Draft uses the same key (PROTOCOLS.md rule 3).
	ReasoningField string
	Reasoning      string
	Content        string
	ToolCalls      []conv.ToolCall
}

// DraftOf returns the Draft of one assembled choice.
func DraftOf(c conv.Choice) Draft {
	return Draft{ReasoningField: c.ReasoningField, Reasoning: c.Reasoning, Content: c.Content, ToolCalls: c.ToolCalls}
}

// Message returns d as a raw assistant message (conv.Choice.Message):
// the reasoning key is present (possibly "") when ReasoningField is set,
// so a DeepSeek-style upstream finds it (PROTOCOLS.md rule 1); tool_calls
// is present only when there are calls.
func (d Draft) Message() []byte {
	return conv.Choice{ReasoningField: d.ReasoningField, Reasoning: d.Reasoning, Content: d.Content, ToolCalls: d.ToolCalls}.Message()
}
