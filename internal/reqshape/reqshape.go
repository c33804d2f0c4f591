// Package reqshape applies reasoning shaping to a whole chat completions
// request: it chooses the rule for the route and model, decides block by
// block under the rule's policy and the route's rendering profile (package
// profile) which reasoning goes out shaped, shapes each with package
// shaping and edits the body in place.
//
// The default policy, cache-aware, shapes what the upstream does not
// render (bytes only, no effect on the prompt or its cache) and a rendered
// block only when the cost model of RENDERING.md §4.2 says it pays, or
// when the prompt breaks before it anyway; see PolicyCacheAware. The
// earlier behaviour is the keep-recent policy.
//
// It keeps the protocol rules of ../shared/PROTOCOLS.md: only the plain
// string reasoning field of assistant messages is edited ("reasoning_content"
// or "reasoning", whichever is there), never renamed and never emptied;
// signed or encrypted reasoning and every message before it are left
// byte-identical; every byte outside the edited strings is kept.
//
// Shaping is deterministic: the same block, profile and request shape give
// the same bytes, so a block changes at most once and the upstream's
// prompt cache keeps hitting from one request to the next.
package reqshape

import (
	"bytes"
	"fmt"
	"math"
	"path"
	"strings"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/slicepool"
	"github.com/shaperproxy/shaperproxy/shaping"
	"github.com/tidwall/gjson"
)

// shapeRule chooses what happens to the reasoning of one route and model.
type shapeRule struct {
	// Route and Model are glob patterns (path.Match); "" matches all.
	Route string
	Model string
	// Shaping is the operation and its budget. OpDrop removes the field
	// only where the protocol lets it go (see Apply); elsewhere it
	// behaves as OpExtract.
	Shaping shaping.Options
	// KeepRecent is the number of latest assistant steps whose reasoning
	// is left as it is (default 1: the step whose tool results are being
	// returned now). Use a negative value to shape every step.
	KeepRecent int
	// ThinkTags opts in to shaping an inline <think>…</think> block at
	// the start of an assistant message's string content.
	ThinkTags bool
	// Policy chooses the blocks; "" is PolicyKeepRecent.
	Policy Policy
}

// rules are tried in order; the first whose patterns match applies. With
// no match the request is left alone.
type rules []shapeRule

// Match returns the first rule for route and model.
func (rs rules) Match(route, model string) (shapeRule, bool) {
	for _, r := range rs {
		if glob(r.Route, route) && glob(r.Model, model) {
			return r, true
		}
	}
	return shapeRule{}, false
}

func glob(pattern, s string) bool {
	if pattern == "" || pattern == "*" {
		return true
	}
	ok, err := path.Match(pattern, s)
	return err == nil && ok
}

// Validate checks every rule and names the first invalid one.
func (rs rules) Validate() error {
	for i, r := range rs {
		if _, err := path.Match(r.Route, ""); err != nil {
			return fmt.Errorf("rule %d: route pattern %q: %w", i, r.Route, err)
		}
		if _, err := path.Match(r.Model, ""); err != nil {
			return fmt.Errorf("rule %d: model pattern %q: %w", i, r.Model, err)
		}
		if err := r.Shaping.Validate(); err != nil {
			return fmt.Errorf("rule %d: %w", i, err)
		}
	}
	return nil
}

// block is one reasoning block the request carried.
type block struct {
	Message  int    // index in messages
	Field    string // "reasoning_content", "reasoning" or "content" (<think>)
	Original string
	Shaped   string // == Original when the block went out unchanged
	Changed  bool
	// Rendered reports whether the profile says the upstream renders the
	// block (always true under the keep-recent policy, which does not ask).
	Rendered bool
	// Reason says why the block went out as it did (reason* constants).
	Reason string
}

// Why a block went out shaped or not.
const (
	reasonKept    = "kept"    // the policy leaves it (keep-recent: a recent step; cache-aware: rendered and not worth a break)
	reasonSame    = "same"    // shaping would not change it, or it is signed, or before signed reasoning
	reasonFrozen  = "frozen"  // the provider wants reasoning back unmodified
	reasonOld     = "old"     // keep-recent: an older step
	reasonFree    = "free"    // not rendered by the upstream: bytes only
	reasonPays    = "pays"    // rendered, shaped from its first re-send because the cost model says it pays
	reasonBreak   = "break"   // rendered, shaped in a request whose prompt breaks before it anyway
	reasonBatched = "batched" // shaped at an earlier break, so shaped again
)

// result is the outcome of Apply.
type result struct {
	// Body is the request to send; it is the input slice itself when
	// nothing changed.
	Body []byte
	// View is the view of Body (the request's own when nothing changed),
	// derived from it without parsing the body again; nil when the edited
	// body does not parse (never, for edits shaping makes), and left to
	// Applied by shapeLater.
	View *conv.Request
	// Applied is the edits applied, whose view (Applied.View) shapeLater
	// leaves to make (nil: no edit): the Shaper's proxy makes it beside
	// the trip upstream (proxy.Call.SetViewLater).
	Applied *conv.Applied
	// Blocks lists every non-empty reasoning block of assistant messages,
	// changed or not, in message order.
	Blocks []block
	// Shaped and Raw count the blocks that went out changed and as they
	// were.
	Shaped, Raw int
	// Prints fingerprint what the request renders (cache-aware policy
	// with a conversation only), and Batched lists the blocks shaped
	// because of a break in it.
	Prints  prints
	Batched []blockKey
	// Break is the first message whose rendering differs from the
	// previous request's, -1 when none does (or none is known).
	Break int
	// Carry is what the next request of the conversation may take from
	// this one (inputs.carry; nil otherwise), held once for its taker;
	// shapeLater leaves it to be made (Later).
	Carry *carry
	// Later is what the carry is made of, when shapeLater left it to be
	// made (nil: none to make): making it, or letting it go, is the
	// caller's.
	Later *carrying
	// Settled is how many first messages took their blocks as the
	// conversation's last request decided them (settled.go).
	Settled int
}

// cand is one block with what shaping it would send.
type cand struct {
	block
	can  bool      // shaping changes it and the protocol allows it
	edit conv.Edit // the edit that shapes it
	out  string    // the shaped reasoning ("" when the field is dropped)
	// content is, for a <think> block, the content sent when shaped; rest
	// the content after </think> (what a template that drops it renders).
	content, rest string
	// after estimates the tokens that follow the block in its message
	// (content, tool calls): billed again when the block changes.
	after int
	// shaped is, for a reasoning field's block, the memo's entry of what
	// shaping gave (nil when it was not asked, or no memo keeps it): what
	// the carry keeps.
	shaped *memoEntry
	// dropped is true when the block's field is cut out (OpDrop).
	dropped bool
}

// inputs are what a request's decisions depend on beyond the rule.
type inputs struct {
	prof    *profile.Profile  // nil: keep-recent decisions, no profile
	batched map[blockKey]bool // blocks shaped at an earlier break
	prev    prints            // the previous request's prints (nil msgs: unknown)
	track   bool              // compute prints (a conversation is known)
	// from is the carry of one of the conversation's last requests (nil:
	// none; carries.get), and carry asks for this one's (result.Carry).
	from  *carry
	carry bool
}

// apply shapes the reasoning of req (a view of its body) under rule with
// the keep-recent policy.
func apply(req *conv.Request, rule shapeRule) result { return applyMemo(req, rule, nil) }

// applyMemo is apply with shaped texts remembered in memo (nil: none).
func applyMemo(req *conv.Request, rule shapeRule, memo *memo) result {
	return shape(req, rule, memo, inputs{})
}

// shape decides every block of req and edits the body.
func shape(req *conv.Request, rule shapeRule, memo *memo, in inputs) result {
	res := shapeLater(req, rule, memo, in)
	if res.Applied != nil {
		res.View, _ = res.Applied.View() // nil when the body does not parse, as Apply's
	}
	res.Blocks = res.Later.fill(res.Blocks)
	res.Carry, res.Later = res.Later.carry(), nil
	return res
}

// shapeLater is shape with the carry left to be made (result.Later): only
// the conversation's next request reads it, so the Shaper makes it once
// the client has the answer (proxy.Call.After), out of the request's and
// the answer's way.
func shapeLater(req *conv.Request, rule shapeRule, memo *memo, in inputs) result {
	res, ok := shapeTaking(req, rule, memo, in, true)
	if !ok { // the prompt broke before the blocks taken as decided: decide them all
		res, _ = shapeTaking(req, rule, memo, in, false)
	}
	return res
}

// carrying is what a request's carry is made of (carryOf, settleOf): its
// view (held by the call until its end), its decisions (cands, whose
// array it owns, the blocks and edits copied out), the print parts
// (owned), prints and blocks shaped at a break, and the carry it took
// from (held).
type carrying struct {
	req   *conv.Request
	rule  shapeRule
	in    inputs
	rd    profile.Rendering
	cands []cand
	// taken counts the blocks taken as decided, which are in neither
	// cands nor the result's blocks: the first of from's (settledCands).
	taken   int
	parts   []partPrints
	prints  prints
	batched []blockKey
	from    *carry
	k       int
}

// settledCands returns the blocks taken as decided, in from's array (nil
// for a nil c, or none): the first of from's decisions, with from's
// strings stripped and edit ranges relative to their messages (settled).
func (c *carrying) settledCands() []cand {
	if c == nil || c.taken == 0 {
		return nil
	}
	return c.from.decided().cands[:c.taken]
}

// fill returns the request's blocks: those taken as decided, left in
// from's array, in front of blocks (the result's, given back). Only
// shape needs them all; the Shaper's booking reads the decided ones
// where they are (Shaper.book).
func (c *carrying) fill(blocks []block) []block {
	pre := c.settledCands()
	if len(pre) == 0 {
		return blocks
	}
	out := room[block](&blockArrays, len(pre)+len(blocks))
	for i := range pre {
		out = append(out, settledBlock(c.req, &pre[i]))
	}
	out = append(out, blocks...)
	if blocks != nil {
		putBlocks(blocks)
	}
	return out
}

// request returns the request the carry is made for (nil for a nil c).
func (c *carrying) request() *conv.Request {
	if c == nil {
		return nil
	}
	return c.req
}

// carry makes the carry (nil for a nil c) and lets go of what it was made
// of.
func (c *carrying) carry() *carry {
	if c == nil {
		return nil
	}
	out := carryOf(c.req, c.rule, c.cands, c.parts, c.prints, c.rd, c.from, c.k)
	// The candidates themselves become the carry's decisions, after
	// those taken as decided.
	if out.settled = settleOf(c.req, c.rule, c.in, c.rd, c.from.decided(), c.taken, c.cands, c.batched); out.settled != nil {
		c.cands = nil
	}
	c.release()
	return out
}

// release lets go of what the carry would have been made of (nil: none).
func (c *carrying) release() {
	if c == nil {
		return
	}
	if c.cands != nil {
		putCands(c.cands)
	}
	if c.parts != nil {
		giveBack(&partArrays, c.parts)
	}
	c.from.release()
	*c = carrying{}
}

// shapeTaking is shape, taking the decisions of the conversation's last
// request for the messages req repeats from its first when take is true
// (settled.go); ok is false, with nothing made, when the prompt breaks
// before the end of those.
func shapeTaking(req *conv.Request, rule shapeRule, memo *memo, in inputs, take bool) (result, bool) {
	from := in.from
	if from != nil && from.rule != rule {
		from = nil // shaped under another rule
	}
	byRendering := in.prof != nil && rule.Policy != PolicyKeepRecent
	withPrints := in.track && byRendering && rule.Policy == PolicyCacheAware
	var rd profile.Rendering
	k := 0 // the first messages whose blocks are taken as decided
	if byRendering {
		rd = in.prof.Of(req)
		if take {
			k = settledPrefix(req, in, rd, from, withPrints)
		}
	}
	// The blocks taken as decided (the first k messages') stay in the
	// carry's array: the hold reads only the changed ones' edits, and
	// what the request keeps (its counts and originals, the next carry)
	// reads them there once the answer is the client's (Shaper.book).
	// Without a carry to make, they are copied here.
	lazy := in.carry && k > 0
	cands, kc := candidates(req, rule, memo, from, k, lazy)
	var taken, changedTaken int // blocks taken as decided and left in the carry, and how many of them changed
	if lazy {
		taken = settledBefore(from.decided(), k)
		changedTaken = changedAmong(from.decided(), taken)
	}
	defer func() {
		if cands != nil {
			putCands(cands) // the blocks are copies; the carry's decisions took none
		}
	}()
	res := result{Body: req.Body, View: req, Break: -1, Settled: k}
	var parts []partPrints // the messages' print parts, when prints are made
	defer func() {
		if parts != nil {
			giveBack(&partArrays, parts) // unless the carry to be made took them
		}
	}()
	if byRendering {
		byProfile(rule.Policy, in, rd, cands[kc:])
	} else {
		keepRecent(req, rule, cands, in.prof != nil && in.prof.Frozen)
	}
	if withPrints {
		if memo != nil {
			parts = memo.prints.of(req, room(&partArrays, len(req.Messages)), from, k)
		}
		res.Prints = fingerprint(req, cands, rd, parts, from, k, in.carry)
		// At a break that happens anyway, the blocks after it are shaped
		// too — where prices are known: without them (an unknown upstream)
		// the policy shapes nothing that is rendered.
		_, priced := in.prof.Prices.HitRatio()
		if res.Break = breakAt(in.prev, res.Prints); res.Break >= 0 && res.Break < k {
			return result{}, false
		}
		if res.Break >= 0 && !in.prof.Frozen && priced {
			if res.Batched = atBreak(res.Break, cands); len(res.Batched) > 0 {
				res.Prints = fingerprint(req, cands, rd, parts, from, k, in.carry)
			}
		}
	}
	var edits []conv.Edit
	if len(cands) > 0 {
		res.Blocks = room[block](&blockArrays, len(cands)) // the hook gives them back (putBlocks)
	}
	if len(cands)+changedTaken > 0 {
		edits = editRoom(len(cands) + changedTaken)
		defer putEdits(edits)
	}
	if taken > 0 {
		edits = settledEdits(edits, req, from.decided(), changedTaken)
		res.Shaped, res.Raw = changedTaken, taken-changedTaken
	}
	for _, c := range cands {
		if c.Changed {
			res.Shaped++
			edits = append(edits, c.edit)
		} else {
			c.Shaped = c.Original
			res.Raw++
		}
		res.Blocks = append(res.Blocks, c.block)
	}
	if in.carry {
		// The carry is made of the candidates, once the blocks and edits
		// are copied out, and of the print parts.
		if from != nil {
			from.refs.Add(1) // held until the carry is made
		}
		res.Later = &carrying{req: req, rule: rule, in: in, rd: rd, cands: cands, taken: taken, parts: parts, prints: res.Prints, batched: res.Batched, from: from, k: k}
		cands, parts = nil, nil
	}
	if len(edits) > 0 {
		// The view of the shaped body comes from the edits, when it is
		// read: the proxy hands it to the observers and the finishers
		// instead of parsing the body again.
		res.Applied = req.ApplyLater(edits)
		res.Body, res.View = res.Applied.Body, nil
	}
	return res, true
}

// keepRecent shapes every block before the latest KeepRecent steps; on a
// frozen profile (the provider asks for reasoning passed back unmodified:
// PROTOCOLS.md rule 2) none.
func keepRecent(req *conv.Request, rule shapeRule, cands []cand, frozen bool) {
	keep := keepFrom(req, rule.KeepRecent)
	for i := range cands {
		c := &cands[i]
		c.Rendered = true
		switch {
		case frozen:
			c.Reason = reasonFrozen
		case !c.can:
			c.Reason = reasonSame
		case c.Message >= keep:
			c.Reason = reasonKept
		default:
			c.Changed, c.Reason = true, reasonOld
		}
	}
}

// byProfile decides the blocks under the cache-aware or free-only policy.
func byProfile(policy Policy, in inputs, rd profile.Rendering, cands []cand) {
	for i := range cands {
		c := &cands[i]
		c.Rendered = rd.Rendered(c.Message)
		switch {
		case in.prof.Frozen:
			c.Reason = reasonFrozen
		case !c.can:
			c.Reason = reasonSame
		case !c.Rendered:
			c.Changed, c.Reason = true, reasonFree
		case policy == PolicyFreeOnly:
			c.Reason = reasonKept
		case len(in.batched) > 0 && in.batched[keyOf(c.Original)]:
			c.Changed, c.Reason = true, reasonBatched
		case pays(in.prof, c.Original, c.out, c.after):
			c.Changed, c.Reason = true, reasonPays
		default:
			c.Reason = reasonKept
		}
	}
}

// atBreak shapes every rendered block at or after message p that could
// change and did not: the prompt breaks before it anyway.
func atBreak(p int, cands []cand) []blockKey {
	var added []blockKey
	for i := range cands {
		c := &cands[i]
		if c.Message >= p && c.can && c.Rendered && !c.Changed {
			c.Changed, c.Reason = true, reasonBreak
			added = append(added, keyOf(c.Original))
		}
	}
	return added
}

// fingerprint returns the prints of req as it will be sent; parts, when
// not nil, are the partPrints of req's messages (from the k-th); from,
// when not nil, the carry of the conversation's last request, whose
// prints are taken for the messages that went out the same way: the
// first k, whose blocks were taken as it decided them, without a look;
// grow, when the prints go in the request's carry (extend).
func fingerprint(req *conv.Request, cands []cand, rd profile.Rendering, parts []partPrints, from *carry, k int, grow bool) prints {
	var was prints // the last request's: the first k are taken from them, and their array when the rest agree
	if from != nil {
		was = from.prints
	}
	n := len(req.Messages)
	// The prints of the messages after the first k: the few a request adds
	// to its conversation's history on the stack, more in a pooled array
	// (each element written below, none kept).
	var few [16]uint64
	tail := few[:]
	if n-k > len(few) {
		more := printArrays.Get(n-k, 4*(n-k)+16)
		defer printArrays.Put(more)
		tail = more
	}
	tail = tail[:n-k]
	j := 0
	for j < len(cands) && cands[j].Message < k {
		j++
	}
	for i := k; i < n; i++ {
		m := &req.Messages[i]
		content, reasoning := m.Content, m.Reasoning
		rendered := rd.Rendered(i) && m.Role == conv.RoleAssistant
		sent := sentRaw
		for ; j < len(cands) && cands[j].Message == i; j++ {
			c := &cands[j]
			switch {
			case c.Field == "content" && !c.Rendered:
				content = c.rest
			case c.Field == "content" && c.Changed:
				content = c.content
			case c.Changed:
				reasoning, sent = c.out, sentOf(c)
			}
		}
		// The same bytes, sent the same way (a message with a <think>
		// block carries no print: carryOf).
		if pc := from.at(i, m); pc != nil && pc.printed && pc.rendered == rendered && pc.sent == sent {
			tail[i-k] = from.prints.msgs[i]
			continue
		}
		var h *partPrints
		if parts != nil {
			h = &parts[i]
		}
		tail[i-k] = messagePrint(m, content, reasoning, rendered, h)
	}
	return was.extend(headPrint(req), k, tail, grow)
}

var printArrays slicepool.Pool[uint64]

// carryOf returns the carry of req, shaped under rule into cands (in
// message order), with its messages' parts (nil: not made) and prints
// (nil msgs: not made) under rd; its first k messages are from's, as they
// were.
func carryOf(req *conv.Request, rule shapeRule, cands []cand, parts []partPrints, pr prints, rd profile.Rendering, from *carry, k int) *carry {
	c := newCarry(rule, len(req.Messages))
	c.prints, c.view = pr, req.ID()
	if k > 0 {
		copy(c.msgs[:k], from.msgs[:k])
	}
	j := 0
	for j < len(cands) && cands[j].Message < k {
		j++
	}
	for i := k; i < len(req.Messages); i++ {
		m := &req.Messages[i]
		e := carried{key: m.RawKey()}
		if parts != nil {
			e.parts, e.hasParts = parts[i], true
		}
		think := false
		for ; j < len(cands) && cands[j].Message == i; j++ {
			k := &cands[j]
			if k.Field == "content" {
				think = true
				continue
			}
			e.after, e.sent, e.shaped = int32(min(k.after, math.MaxInt32)), sentOf(k), k.shaped
		}
		if pr.msgs != nil && !think {
			e.printed = true
			e.rendered = rd.Rendered(i) && m.Role == conv.RoleAssistant
		}
		c.msgs[i] = e
	}
	return c
}

// candidates returns every block of req with the shaped text and edit
// it would go out with.
//
// from, when not nil, is the carry of the conversation's last request
// under the same rule: a message found there with the same bytes takes
// its reasoning block's shaped text and token estimate from it instead of
// the memo; and the first k messages take their blocks whole, as it
// decided them (settledPrefix), the first kc candidates — or, when lazy,
// none: they stay in from's array (carrying.settledCands).
func candidates(req *conv.Request, rule shapeRule, memo *memo, from *carry, k int, lazy bool) (out []cand, kc int) {
	floor := req.LastSigned()
	noTools := rule.Shaping.Op == shaping.OpDrop && !profile.HasTools(req) // only dropping asks
	// The messages that can give a block: room for them in one
	// allocation, and none when none can.
	n := 0
	if s := from.decided(); k > 0 && !lazy {
		n = len(s.cands) // at most: those of the first k, and more
	}
	for i := k; i < len(req.Messages); i++ {
		if m := &req.Messages[i]; m.Role == "assistant" {
			n += btoi(hasReasoning(m)) + btoi(hasThink(m, rule))
		}
	}
	if n > 0 {
		out = candRoom(n)
	}
	if k > 0 && !lazy {
		out, kc = takeSettled(out, req, from.decided(), k)
	}
	begun := false // the memo's places, begun at its first ask: none when every block is carried
	ask := func() {
		if !begun {
			memo.begin(len(req.Messages))
			begun = true
		}
	}
	for i := k; i < len(req.Messages); i++ {
		m := &req.Messages[i]
		if m.Role != "assistant" {
			continue
		}
		// The last message, when the assistant's, is a prefill the model
		// continues (DeepSeek's "prefix": true): what it wrote, not history.
		allowed := i > floor && !m.Signed && i < len(req.Messages)-1
		// Each block is written in place at the end of out (a candidate
		// is a few hundred bytes; a long history has hundreds).
		// (within the room counted above: only a message that can give
		// one takes a place).
		if hasReasoning(m) {
			pc := from.at(i, m)
			if pc.entry() == nil && allowed && rule.Shaping.Op != shaping.OpKeep { // shaping is asked
				ask()
			}
			if out = append(out, cand{}); !reasoningCand(&out[len(out)-1], req.Body, m, rule, memo, allowed, noTools, pc) {
				out = out[:len(out)-1]
			}
		}
		if hasThink(m, rule) {
			ask()
			if out = append(out, cand{}); !thinkCand(&out[len(out)-1], req.Body, m, rule, memo, allowed) {
				out = out[:len(out)-1]
			}
		}
	}
	return out, kc
}

// candArrays, editArrays, blockArrays and partArrays are a request's
// candidates, edits, blocks (its result's) and its messages' print parts,
// for the next requests: a long history has hundreds of each, garbage
// once its body is edited.
var (
	candArrays  slicepool.Pool[cand]
	editArrays  slicepool.Pool[conv.Edit]
	blockArrays slicepool.Pool[block]
	partArrays  slicepool.Pool[partPrints]
)

// putBlocks gives back the blocks of a result once nothing reads them.
func putBlocks(bs []block) { giveBack(&blockArrays, bs) }

// candRoom returns an empty slice with room for n candidates.
func candRoom(n int) []cand { return room(&candArrays, n) }

// editRoom returns an empty slice with room for n edits.
func editRoom(n int) []conv.Edit { return room(&editArrays, n) }

// putCands gives cs back (cleared: its strings alias a body).
func putCands(cs []cand) { giveBack(&candArrays, cs) }

// putEdits gives es back (cleared: its tokens are the memo's, and may go).
func putEdits(es []conv.Edit) { giveBack(&editArrays, es) }

// room returns an empty slice with room for n from pool, taking one at
// most four times too large.
func room[T any](pool *slicepool.Pool[T], n int) []T { return pool.Get(n, 4*n+16) }

// giveBack clears s (its elements hold strings of a body, or the memo's)
// and puts it in pool.
func giveBack[T any](pool *slicepool.Pool[T], s []T) {
	clear(s[:cap(s)])
	pool.Put(s)
}

// keepFrom returns the index of the first assistant message whose
// reasoning is kept (len(messages) when none is).
func keepFrom(req *conv.Request, keepRecent int) int {
	if keepRecent == 0 {
		keepRecent = 1
	}
	if keepRecent < 0 {
		return len(req.Messages)
	}
	seen := 0
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "assistant" {
			seen++
			if seen == keepRecent {
				return i
			}
		}
	}
	return 0
}

// hasReasoning reports whether an assistant message's reasoning field can
// give a block, and hasThink whether its content's <think> block can
// (candidates counts them, reasoningCand and thinkCand start with them).
func hasReasoning(m *conv.Message) bool { return m.ReasoningStart >= 0 && m.Reasoning != "" }

func hasThink(m *conv.Message, rule shapeRule) bool {
	return rule.ThinkTags && m.ContentIsString && strings.HasPrefix(strings.TrimLeft(m.Content, " \t\r\n"), "<think>")
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// reasoningCand handles the reasoning field of one assistant message; pc,
// when not nil, is the message carried from the conversation's last
// request (the same bytes, shaped under the same rule).
//
// The block's token estimate of what follows it (cand.after) is made only
// where a policy weighs it: not under keep-recent, which decides by place.
func reasoningCand(c *cand, body []byte, m *conv.Message, rule shapeRule, memo *memo, allowed, noTools bool, pc *carried) bool {
	if !hasReasoning(m) {
		return false
	}
	*c = cand{block: block{Message: m.Index, Field: m.ReasoningField, Original: m.Reasoning, Shaped: m.Reasoning}}
	switch {
	case pc != nil:
		c.after = int(pc.after)
	case rule.Policy != PolicyKeepRecent:
		c.after = Tokens(m.Content) + callTokens(m)
	}
	if !allowed || rule.Shaping.Op == shaping.OpKeep { // keeping changes nothing: no shaping asked
		return true
	}
	opts := rule.Shaping
	if opts.Op == shaping.OpDrop {
		if noTools && len(m.ToolCalls) == 0 {
			if e, ok := dropField(body, m); ok {
				c.Shaped, c.can, c.edit, c.dropped = "", true, e, true
				return true
			}
		}
		opts.Op = shaping.OpExtract // the protocol needs the field: keep it, shaped
	}
	var out string
	var quoted conv.String
	var changed bool
	if e := pc.entry(); e != nil {
		c.shaped, changed, quoted = e, e.changed, e.quoted
		if out = m.Reasoning; changed {
			out = e.out
		}
	} else {
		out, quoted, changed, c.shaped = memo.shapeEntry(source{m.RawKey(), partReasoning}, placeOf(m.Index, partReasoning), m.Reasoning, opts, true)
	}
	if !changed || out == "" {
		return true
	}
	c.Shaped, c.out, c.can = out, out, true
	c.edit = quoted.Replace(m.ReasoningStart, m.ReasoningEnd)
	return true
}

// dropField removes `"field": value` and one adjacent comma from the
// message object. It refuses (false) when the layout is not the plain one
// it can cut safely.
func dropField(body []byte, m *conv.Message) (conv.Edit, bool) {
	key := []byte(`"` + m.ReasoningField + `"`)
	i := skipSpaceBack(body, m.ReasoningStart-1)
	if i < 0 || body[i] != ':' {
		return conv.Edit{}, false
	}
	i = skipSpaceBack(body, i-1)
	keyStart := i + 1 - len(key)
	if keyStart < m.Start || !bytes.Equal(body[keyStart:i+1], key) {
		return conv.Edit{}, false
	}
	j := skipSpaceBack(body, keyStart-1)
	switch {
	case j >= m.Start && body[j] == ',':
		return conv.Edit{Start: j, End: m.ReasoningEnd}, true
	case j >= m.Start && body[j] == '{':
		k := skipSpace(body, m.ReasoningEnd)
		if k < m.End && body[k] == ',' {
			return conv.Edit{Start: keyStart, End: skipSpace(body, k+1)}, true
		}
	}
	return conv.Edit{}, false
}

func skipSpaceBack(b []byte, i int) int {
	for i >= 0 && isSpace(b[i]) {
		i--
	}
	return i
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// callTokens estimates the tokens of m's tool calls.
func callTokens(m *conv.Message) int {
	n := 0
	for _, c := range m.ToolCalls {
		n += Tokens(c.ID) + Tokens(c.Name) + Tokens(c.Arguments)
	}
	return n
}

// thinkCand handles an inline <think>…</think> block at the start of the
// string content, when the rule opts in.
func thinkCand(c *cand, body []byte, m *conv.Message, rule shapeRule, memo *memo, allowed bool) bool {
	if !hasThink(m, rule) {
		return false
	}
	cv := gjson.GetBytes(body[m.Start:m.End], "content")
	if cv.Type != gjson.String || cv.Index == 0 {
		return false
	}
	cStart := m.Start + cv.Index
	cEnd := cStart + len(cv.Raw)
	const open, close = "<think>", "</think>"
	trimmed := strings.TrimLeft(m.Content, " \t\r\n")
	if !strings.HasPrefix(trimmed, open) {
		return false
	}
	lead := m.Content[:len(m.Content)-len(trimmed)]
	inner, rest, ok := strings.Cut(trimmed[len(open):], close)
	if !ok || strings.TrimSpace(inner) == "" {
		return false
	}
	*c = cand{block: block{Message: m.Index, Field: "content", Original: inner, Shaped: inner}, rest: rest,
		after: Tokens(rest) + callTokens(m)}
	if !allowed {
		return true
	}
	opts := rule.Shaping
	if opts.Op == shaping.OpDrop {
		opts.Op = shaping.OpExtract
	}
	out, changed := memo.Shape(source{m.RawKey(), partThink}, placeOf(m.Index, partThink), inner, opts)
	if !changed || out == "" {
		return true
	}
	c.Shaped, c.out, c.can = out, out, true
	c.content = lead + open + out + close + rest
	c.edit = conv.Edit{Start: cStart, End: cEnd, Repl: jsonstr.Quote(c.content)}
	return true
}
