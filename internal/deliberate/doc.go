// Package deliberate serves the `deliberate` tool from the proxy, for every
// agent tool at once and without the agent knowing (seed 003 §6, §8–§10,
// seed 000): the model asks for up to three second opinions before it
// commits, each a one-shot child request with a history fixed by its role
// and a structured answer.
//
//   - The tool appears: on enabled routes the Deliberator adds the
//     `deliberate` function (fixed bytes, so the prompt cache keeps
//     hitting) to chat requests that already declare tools.
//   - Three roles, three histories: independent-alternative (fresh: the
//     goal and context only), trajectory-audit (fork: the whole
//     conversation and the incumbent plan), masked-review (mid-fork: the
//     conversation before the last K complete steps byte for byte, then a
//     projection of those steps with their reasoning masked, as the
//     automatic review does).
//   - The call never reaches the client: a `deliberate` call alone is held
//     back, its branches run, and the model's continuation streams into the
//     same response; beside the client's own tool calls, the client gets
//     its calls and the deliberate call and result are spliced into the
//     next request. Every later request gets the hidden call and result
//     back, byte for byte, from the ledger.
//
// The request and response logic (tool bytes, arguments, child requests,
// chunk edits, the result text) is pure and tested without a network; the
// Deliberator wires it to the proxy's hooks.
package deliberate
