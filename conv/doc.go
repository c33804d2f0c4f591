// Package conv is the conversation model the rest of shaperproxy reads: a
// read-only view of a chat completions request over its raw bytes, the
// turns and steps of the conversation, a stable conversation key, and an
// assembler that rebuilds a response from its stream.
//
// The package is pure: bytes in, values out; no network, no clock, no
// struct is ever unmarshalled and marshalled again. JSON is read with
// gjson and the view records byte ranges so that other packages can edit
// the body in place.
//
// # Requests
//
//	req, err := conv.ParseRequest(body) // errors.Is(err, conv.ErrNotChat) for other bodies
//	for _, m := range req.Messages {
//		if m.HasReasoningKey && !m.Signed && m.ReasoningStart >= 0 {
//			// body[m.ReasoningStart:m.ReasoningEnd] is the JSON string of m.Reasoning
//		}
//	}
//	key := conv.ConversationKey(req, r.Header.Get("X-Shaper-Conversation"))
//
// The view's strings share the body's memory. A transform that edits the
// body gets the new view from its edits (req.Apply(edits)), and a proxy
// that sees a conversation's growing history parses it with a Reparser,
// which takes the messages an earlier request already had from that
// request's view; both return exactly what ParseRequest would.
//
// # Turns and steps
//
// Turns() splits the messages by these rules:
//
//   - Messages before the first user message (the system/developer
//     prelude, including any assistant or tool message there) belong to no
//     turn.
//   - A user message opens a new turn, except while the open turn is inside
//     a tool loop: its last assistant message has tool calls (answered or
//     not). A user message then belongs to the open turn, because for
//     DeepSeek a user message inside a tool loop must not start a new turn
//     (PROTOCOLS.md rule 4). The loop ends with an assistant message
//     without tool calls.
//   - Each assistant message is one step. A tool message belongs to the
//     latest step of the turn whose assistant made a call with its
//     tool_call_id; when no step made that call it goes to the turn's
//     latest step, and when the turn has no step yet, to the turn's Inputs.
//   - Every other message of a turn (the opening user message, and users,
//     systems or developers injected later) is listed in Inputs.
//   - The last turn is the open turn. StartsNewTurn is true when it has no
//     assistant message yet (a fresh user message, possibly followed by
//     injected messages); it is false when the request has no user message.
//
// # Responses
//
//	a := conv.NewAssembler()
//	for each SSE event { a.AddChunk(ev.Data) } // or a.AddBody(body)
//	resp := a.Response()
//
// The assembler joins each field with itself only (reasoning with
// reasoning, content with content, a tool call's arguments with the same
// call's), ignores nulls, and keeps the last usage object whatever shape it
// came in.
package conv
