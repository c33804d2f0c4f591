package review

import (
	"fmt"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/profile"
)

// noticeRole is the role of the notice message when it is a system
// message (noticeMessage); placeNotice chooses the form by profile.
const noticeRole = "system"

// reviewTool is the name of the synthetic tool call a tool-pair notice
// answers. It is never declared in "tools": adding a tool to the
// declarations would change the head of every later prompt
// (RENDERING.md §4.3).
const reviewTool = "masked_review"

// notice renders p as the text the model reads before it revises: a
// numbered list of the items with their kind and certainty, framed as
// coming from an automatic reviewer and not from the user. A no_update
// packet renders as a short "found nothing" notice (for a publication
// policy that publishes every packet).
func notice(p Packet) string {
	var b strings.Builder
	b.WriteString("Automatic masked review by the proxy (not from the user): a second look at this turn with your reasoning hidden ")
	if len(p.Items) == 0 {
		b.WriteString("found nothing to add. Keep your answer unless you see a reason to change it; then say briefly what changed.")
		return b.String()
	}
	b.WriteString("found:\n")
	for i, it := range p.Items {
		fmt.Fprintf(&b, "%d. [%s, %s] %s\n", i+1, it.Kind, it.Certainty, it.Content)
	}
	b.WriteString("The reviewer saw only your visible text, tool calls and results; its points may be wrong. Revise your answer if these hold; otherwise say briefly why not.")
	return b.String()
}

// noticeMessage returns the notice as a raw message:
// {"role":"system","content":Notice(p)}.
func noticeMessage(p Packet) []byte {
	b := append(appendString([]byte(`{"role":`), noticeRole), `,"content":`...)
	return append(appendString(b, notice(p)), '}')
}

// placeNotice returns the draft as the continuation request and the
// later history carry it, and the notice message after it, in the form
// pl says (the profile's ReviewNotice):
//
//   - PlaceSystem: the draft, then {"role":"system","content":notice};
//   - PlaceUser: the draft, then {"role":"user","content":notice};
//   - PlaceToolPair: the draft with one more tool call, to reviewTool
//     with arguments "{}" and an id derived from turnKey, then
//     {"role":"tool","tool_call_id":id,"content":notice}. The draft stays
//     a tool-call message, so templates that drop a final answer's
//     reasoning (Kimi-K2-Thinking) keep the turn's.
//
// The bytes depend on the draft, the packet, pl and turnKey only; the
// ledger keeps them, so every later request carries the same bytes.
func placeNotice(draft Draft, p Packet, pl profile.Placement, turnKey string) (Draft, []byte) {
	text := notice(p)
	switch pl {
	case profile.PlaceToolPair:
		id := reviewCallID(turnKey)
		draft.ToolCalls = append(append([]conv.ToolCall(nil), draft.ToolCalls...),
			conv.ToolCall{ID: id, Type: "function", Name: reviewTool, Arguments: "{}"})
		b := append(appendString([]byte(`{"role":"tool","tool_call_id":`), id), `,"content":`...)
		return draft, append(appendString(b, text), '}')
	case profile.PlaceUser:
		return draft, append(appendString([]byte(`{"role":"user","content":`), text), '}')
	}
	return draft, noticeMessage(p)
}

// reviewCallID is the id of the synthetic review call of a turn.
func reviewCallID(turnKey string) string {
	k := strings.TrimPrefix(turnKey, "t:")
	return "call_" + reviewTool + "_" + k[:min(len(k), 16)]
}
