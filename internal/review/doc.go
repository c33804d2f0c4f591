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
// # The notice, and why it is a system message
//
// The revision must happen inside the same turn. For DeepSeek a user
// message starts a new turn and the turn's reasoning is discarded
// (PROTOCOLS.md rule 4); a user message would also put words in the
// user's mouth. A system message is the harness speaking, which is what
// the notice is: Notice says it comes from the proxy's automatic review,
// not from the user. ContinuationRequest appends the draft (with its
// reasoning, under the key the upstream used) and the notice to the
// primary's messages; the model then writes its continuation.
//
// Caveat, not verified here: reports from other proxies (routatic/proxy
// PR #76, claude-code-router-next PR #1) say DeepSeek V3.x/V4 moves every
// system message to the front of the prompt. The notice would then be
// read as part of the system prompt, and the continuation request (and
// every later request of the conversation, once Restore puts the notice
// back) would miss the prompt cache from the front. Measure
// prompt_cache_hit_tokens of the continuation before relying on it.
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
