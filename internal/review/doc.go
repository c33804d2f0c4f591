// Package review is the pure logic of the masked review: when the model
// is about to end a turn (a response with finish_reason "stop" and no tool
// calls), the proxy replays what the model did to the same model with the
// turn's reasoning hidden, asks for a short structured second look (a
// packet), and if the packet has something to say the model revises
// before the client sees the turn end.
//
// The package is bytes in, bytes out: no network, no clock, no state.
// JSON is found with gjson and edited in place with sjson; the primary
// request is never unmarshalled and marshalled again.
//
// # The pieces, in the order the proxy uses them
//
//	draft := review.DraftOf(assembled.Choices[0])         // the turn-ending response
//	key := review.TurnKey(req, conversation)               // once per turn: ledger MarkReviewed(conversation, key)
//	child, err := review.BuildChild(req, draft, review.ChildOptions{})
//	// a *SkipError (SkipReason) means: no review for this turn
//	// POST child.Body upstream (not through the proxy's own hooks) ...
//	p, err := review.ParsePacket(childResponseBody)        // err: count as "invalid"
//	if p.Status == review.StatusUpdate {
//		notice := review.NoticeMessage(p)
//		body, err := review.ContinuationRequest(req.Body, draft, notice)
//		// POST body upstream; stream the answer through a StreamMerger
//		// (or merge a non-streamed one with MergeBodies), then record
//		// review.NewInsertion(draft, notice, review.DraftOf(continuation))
//	}
//	// later requests of the conversation:
//	body, n, err := review.Restore(req, lookup)
//
// # The child request (the mid-fork)
//
// The child is built from history, not from the model's replay state.
// Its messages are the primary's messages before the open turn, copied
// byte for byte with their separators (so the upstream's prefix cache can
// apply), then one new user message: the review Task followed by a
// snapshot of the open turn. The snapshot is a projection: the turn's
// inputs labelled by source (user, system, developer, other), the actor's
// visible text labelled as its claims, its tool calls with their
// arguments, the tool results (errors included, as the client wrote
// them), and the draft as the last step. Reasoning is never copied: not
// the reasoning fields, not signed blocks, not an inline <think> block.
// With MaskActionOnly the actor's visible text (and its images) go too.
// Images are kept as references ("[image 1: image_url part of message
// 7]"), never as bytes.
//
// Removing only the reasoning key from native assistant messages would be
// neither valid (DeepSeek answers 400 when reasoning is missing from a
// tool-call message, PROTOCOLS.md rule 1) nor the same state without the
// rationale; that is why the open turn becomes a text snapshot in a new
// user message, the child's own new turn.
//
// A snapshot larger than MaxSnapshotChars (65,536) or with more than
// MaxImages (20) image references skips the review whole: a child never
// judges a truncated trajectory.
//
// # The notice, and where it goes
//
// The revision must happen inside the same turn, with the turn's
// reasoning still in the prompt, and the notice must reach the model in
// place, after the draft, with a role. Where that is depends on what the
// upstream renders (../shared/RENDERING.md §3–§4.3), so placeNotice
// follows the route's rendering profile (package profile):
//
//   - DeepSeek V4 and V3.x: a user message. V4 keeps every reasoning when
//     the request has tools; V3.x renders none in history; a system
//     message would be moved to the front (V3.x) or written as raw text
//     without a role (V4).
//   - Qwen3, GLM: a system message, rendered in place; a user message
//     would drop the turn's reasoning.
//   - Kimi-K2-Thinking, MiniMax-M2, DeepSeek V3.2 self-hosted: the draft
//     gets one synthetic tool call (masked_review, never declared in
//     tools, so the head of the prompt is unchanged) and the notice is its
//     tool result; the draft stays a tool-call message, so Kimi keeps the
//     turn's reasoning and MiniMax does not drop the notice. Whether a
//     hosted API accepts the undeclared tool name is not known: if it
//     refuses, the continuation fails and the draft stands.
//
// Notice says it comes from the proxy's automatic review, not from the
// user. ContinuationRequest appends the draft (with its reasoning, under
// the key the upstream used) and the notice to the primary's messages;
// the model then writes its continuation. The ledger keeps the exact
// bytes, so every later request carries the same ones. A user notice opens
// a turn of its own in the history; that turn is marked reviewed too.
//
// The child keeps the primary's tools (and, where the profile says the
// upstream accepts it and still renders them, tool_choice "none"), so the
// head of its prompt is the primary's and hits the prompt cache.
//
// # What the client sees
//
// One assistant message: the draft, Separator, the continuation.
// StreamMerger rewrites the continuation's stream for that (the proxy
// holds back the draft's finish chunk and [DONE]); MergeBodies merges
// non-streamed bodies. Usage in a merged body is the sum of both calls
// (SumUsage); a StreamMerger sums only when given DraftUsage.
//
// # History restoration
//
// In later requests the client sends back the merged message. Restore
// replaces it with what the model actually saw: draft, notice,
// continuation. It matches by the sha256 of the merged visible content
// (InsertionKey), because clients re-serialize the messages they send;
// only messages containing Separator are looked up, so a request without
// a revised turn costs a substring search per assistant message.
//
// # Honest limits
//
// This is a second, history-controlled look, not a judge: the child is
// the same model and may share the actor's errors, the packet's
// certainty is the child's own claim, the older prefix still carries
// earlier reasoning, and nothing the turn already did (files written,
// commands run) is undone.
package review
