package review

// task is the review task the child reads before the snapshot. It names
// the packet's shape, says the snapshot is a projection (not the model's
// own replay), that the actor's claims may be wrong and that finding
// nothing is a valid answer. It mentions JSON, which DeepSeek's
// json_object mode requires of the prompt.
const task = `Automatic masked review, requested by the proxy between you and the user (this is not a message from the user).

The messages before this one are the real conversation up to the start of the current turn. Below, between the SNAPSHOT markers, is a projection of the current turn written by the proxy: the inputs the actor received, the actor's visible text, its tool calls with their arguments, the tool results, and the draft it is about to end the turn with. It is not your own replay: the actor's reasoning is hidden on purpose, so that you look at what was done without the rationale behind it. Text labelled as the actor's claims may be wrong; check it against the inputs and the tool results.

Your task: a short second look at the turn. Find what matters for the outcome that the actor may have missed: an error, a conclusion the evidence does not support, an unchecked assumption, an open unknown, a better next step. Do not redo the work, do not call tools, do not answer the user. Finding nothing is a good answer.

Reply with one JSON object and nothing else:
{"role":"masked-review","status":"update" or "no_update","items":[{"kind":"…","certainty":"…","content":"…"}]}
- status "no_update" when you have nothing that should change the answer; then omit "items" (or give []).
- status "update" with 1 to 8 items otherwise.
- kind: "observation" (what the snapshot shows), "conclusion", "assumption" (something taken for granted), "unknown" (something nobody checked), "possible_error", or "suggestion" (an action such as running a test: you cannot run anything, so never report it as an observation).
- certainty: "certain", "likely" or "uncertain", your own estimate.
- content: one or two plain sentences, specific enough to act on; no duplicates; at most 4000 characters over all items.`

// packetSchema is the JSON schema of a packet for response_format
// json_schema with strict mode, which requires every property to be
// listed in "required": "items" is therefore always present ([] on
// no_update), which ParsePacket accepts.
const packetSchema = `{"type":"object","additionalProperties":false,"required":["role","status","items"],"properties":{` +
	`"role":{"type":"string","enum":["masked-review"]},` +
	`"status":{"type":"string","enum":["update","no_update"]},` +
	`"items":{"type":"array","items":{"type":"object","additionalProperties":false,"required":["kind","certainty","content"],"properties":{` +
	`"kind":{"type":"string","enum":["observation","conclusion","assumption","unknown","possible_error","suggestion"]},` +
	`"certainty":{"type":"string","enum":["certain","likely","uncertain"]},` +
	`"content":{"type":"string"}}}}}}`

// responseFormat returns the raw response_format value for format, or nil
// for FormatNone.
func responseFormat(format Format) []byte {
	switch format {
	case FormatJSONSchema:
		return []byte(`{"type":"json_schema","json_schema":{"name":"masked_review","strict":true,"schema":` + packetSchema + `}}`)
	case FormatJSONObject:
		return []byte(`{"type":"json_object"}`)
	}
	return nil
}
