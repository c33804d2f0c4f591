// Package guard watches an agent's conversation for two signals and
// decides what the proxy tells the model about them:
//
//   - ECHO: the same tool call failing again and again;
//   - STALL: long reasoning without visible output.
//
// The package is pure: requests (conv.Request) and responses (conv.Choice)
// in, values out; no clock, no network, no goroutines. The wiring keeps a
// Projection (in memory) and a State (persisted) per conversation key:
//
//	g, err := guard.New(cfg)                 // cfg.Validate names the bad key
//	sig, stats := proj.Update(req)           // one fold, only new messages
//	dec, next := g.Decide(state, req, sig)   // notices, step-down, events
//	body, err = guard.ApplyPlacements(req, dec.Placements)
//	body, _ = guard.StepDown(body, g.Lowering(route, upstream), dec.StepDown)
//	save(key, next); log(dec.Events)
//	// at the end of the response:
//	events, next := g.ObserveResponse(next, req, sig, choice)
//
// Run the guard on the client's body before any other transform: the
// STALL measure reads the reasoning the client sent back, and the notices
// are anchored to the bytes of the messages they were appended to.
//
// # ECHO
//
// A call's signature is its tool name and its arguments as canonical JSON
// (Canonical: keys sorted recursively, arrays in order, types kept,
// numbers compared by exact decimal value so 1 and 1.0 are equal). Only
// its SHA-256 is kept. Arguments that are not valid JSON, the empty string
// included, are unknown and match nothing.
//
// Identity. A call is known by its id and its position in the
// conversation. It gives failure evidence only when it has an id and a
// result names that id: a result answers the latest call with its id made
// before it; the first such result counts, and later ones are
// duplicates. An id used again after the earlier call with it got its
// result names a new call: providers such as Kimi reuse ids across steps
// ("functions.run_build:0" in every step), and three such failing calls
// are an ECHO like three with distinct ids. The same call (same id, tool
// and arguments) repeated before its result is counted once; repeated
// after it and not answered (yet), it is taken for the earlier call sent
// again and the run looks past it. A result whose id names no earlier
// call is an orphan and counts for nothing. A call without an id, and an
// id used for two different calls that both wait for a result, make the
// calls untrusted: the guard prefers missing an ECHO to inventing one.
//
// Failure. A result is a failure only by an explicit rule (Config):
//
//   - the tool message has "is_error": true (ErrorFlags);
//   - its content is a JSON object with a top-level "error" that is not
//     null, false or "" (ErrorKeys);
//   - its content starts, after white space, with "Error:", "ERROR:",
//     "error:" or "<tool_use_error>" (FailurePrefixes);
//   - one of its first or last five non-empty lines is, as a whole line,
//     a non-zero exit code: "exit code: 1", "Exit code 2", "exit status 1",
//     "exit_code=127", "Process exited with code 1" (FailureLines; the
//     first capture group must be a non-zero integer).
//
// Nothing else is read: a word such as "error" or "failed" in the middle
// of an output is never a failure. Everything else is a success.
//
// Causal order. Failures are counted at the tail of the history in the
// order the calls were made, not the order their results arrived: from
// the newest call backwards, while calls are trusted failures with known
// arguments and the same signature. A call with another signature, a
// success, a call with no result yet or an untrusted call ends the run.
// A late success of an older call therefore does not erase three newer
// failures, and an older failure cannot jump over a newer success.
//
// Acknowledgement. When the run reaches the threshold (3) the notice is
// placed once and the run's newest call, by id and position
// (State.AckCallID, State.AckSeq), is acknowledged: that call and all
// before it no longer count. Without a new failure nothing
// repeats; a new run of three failures after it triggers again.
//
// # STALL
//
// A step's measure is its reasoning length in characters (runes) before
// any visible content or tool call; reasoning always comes first on the
// wire, so it is the step's whole reasoning (or its inline <think>
// block). The turn's measure is the sum over the steps of the open turn
// (conv's turn rules). A STALL holds when the newest step reaches
// StallStepChars (12,000) or the turn reaches StallTurnChars (40,000).
//
// Why these numbers. Characters, because the proxy sees text and every
// upstream counts tokens differently. In English reasoning a token is
// about 3.5 to 4 characters, so 12,000 characters are 3,000 to 3,500
// tokens of thought before a single visible byte: one to two minutes of
// silence at 30 to 60 tokens a second, several times an ordinary agent
// step (choosing the next call takes hundreds to a few thousand
// characters). 40,000 characters, about 10,000 tokens, across one turn is
// more than three such steps. They are starting points for a heuristic,
// not a healthy-thinking limit or a measured model capability, and
// Chinese reasoning, at about one token a character, gets three to four
// times more tokens under them. That is why the default action is
// "observe": it records the counts so the thresholds can be tuned before
// anyone turns on "interrupt".
//
// Observe records a StallObserved event (counts and effort, never the
// reasoning text) once per continuing stall: State.StallReported is set,
// and cleared when a known measure is below both thresholds, so a stall
// after it is recorded again. A measure is not known when the newest step
// carries no reasoning (a client that does not send it back); it then
// neither records nor clears. Interrupt places a notice in the next
// request of the conversation and starts the step-down window; a request
// that starts a new turn drops a pending interrupt (the stalled turn is
// over). ECHO is decided independently in every request: a stall,
// observed or not, never hides or delays it, and observing uses up no
// ECHO state.
//
// # Notices and where they go
//
// A notice is appended, after a blank line, to the content of an existing
// message, returned as a Placement (message index and text):
//
//   - ECHO: the result of the newest failed call (the last tool result
//     of the run);
//   - STALL: the last message of the request, when it is a tool result or
//     a user message inside the open turn's tool loop.
//
// Never a new user message inside a tool loop: for DeepSeek a user message
// starts a new turn and the turn's reasoning is discarded (PROTOCOLS.md
// rule 4). Not a new system message either: several chat templates accept
// a system message only at the start, and OpenAI requires the tool results
// to follow their assistant message directly. Appending to a content that
// is already there keeps every request valid. The text says it comes from
// the proxy's guard, names the tool and the count, and carries no
// bracketed tag the model could learn to copy (EchoText, StallText).
//
// Every notice placed is kept in State.Notices with the hash of its
// message and placed again in later requests where that message is
// unchanged: the model keeps seeing the history it answered to, and a
// retried request is sent with the same bytes.
//
// # Step-down
//
// With StepDownRequests = N > 0, a STALL interrupt lowers the reasoning
// effort of N requests, the one carrying the notice first; then the
// client's own value passes again. Each route has a Lowering of the
// upstream's own values, applied once per request to the value the client
// sent: DeepSeek reasoning_effort max→high (it only knows high and max);
// OpenAI reasoning_effort xhigh→high→medium→low; OpenRouter
// reasoning.effort, same values. Numeric budgets are lowered too, on every
// route: reasoning.max_tokens (OpenRouter), thinking.budget_tokens
// (Anthropic style) and thinking_budget (Qwen) are halved, never below
// MinBudget (1024, Anthropic's minimum); a budget that is not a whole
// number is left as it is. A request without the key is left alone: the
// proxy never adds an effort or a budget the client did not choose. N = 0
// (the default) never rewrites them.
//
// # One fold
//
// Both signals come from one pass over the messages. A Projection keeps
// that pass between requests and folds only the new messages when the
// earlier ones are byte-identical (checked with a fast hash); any edit,
// reordering or truncation folds again from the start. Its result always
// equals Guard.Fold.
package guard
