package reqshape

import (
	"reflect"
	"sort"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/profile"
)

// settled is what a carry keeps of its request's decisions: each block as
// it went out (shaped or not, why, with which edit), and what those
// decisions depended on besides the messages' bytes. The conversation's
// next request takes them for the messages it repeats from its first
// (settledPrefix) instead of deciding those blocks again: for an agent's
// tool loop, the whole history but the newest step.
//
// A block's decision depends on its message's bytes, the rule, the
// profile, whether the profile renders it (by the request's boundary and
// whether it declares tools: profile.Rendering), the set of blocks shaped
// at earlier breaks, the last signed message and whether the message is
// the request's last (a prefill); and, for the blocks after a break in the
// request, on the break. With the same rule, profile, set and last signed
// message, a message neither request's last, with the same bytes and
// rendered alike, goes out as it went out before, with the same print; a
// break before the messages taken, which only a request of the
// conversation sent meanwhile can cause, makes the request decide
// everything anew.
// TestCarryChangesNothing checks the outcome is the same as without.
type settled struct {
	prof    *profile.Profile
	rd      profile.Rendering
	batched map[blockKey]bool // the very set decided with (record replaces, never changes, a set)
	floor   int               // the request's last signed message
	// cands are its blocks as decided, in message order, without the
	// strings of its body (Original, Shaped, Field: the taker's own
	// message gives them) and with each edit's range made relative to its
	// message's start.
	cands []cand
	// changed are the indices of the cands that went out changed, in
	// order: the taker's hold reads only those (settledEdits), and copies
	// the rest where they are once its answer is the client's (Shaper.book).
	changed []int32
}

// settleOf returns the decisions of req's blocks for the next request:
// prior's first taken (those req took as decided, already settled),
// then cands (req's others, final), made of cands itself (which the
// caller then no longer owns) when prior gave none. It is nil when they
// cannot be taken: under the keep-recent policy (which decides by
// distance from the end), with <think> blocks (whose texts are the
// body's), after a break shaped blocks in this request (the set the next
// one reads differs), or when a shaped text is not the memo's own (it
// would be the body's memory). The blocks taken as decided were checked
// when prior was settled, under the same rule and profile.
func settleOf(req *conv.Request, rule shapeRule, in inputs, rd profile.Rendering, prior *settled, taken int, cands []cand, batched []blockKey) *settled {
	if in.prof == nil || rule.Policy == PolicyKeepRecent || rule.ThinkTags || len(batched) > 0 {
		return nil
	}
	for i := range cands {
		if c := &cands[i]; c.Field == "content" || c.can && c.shaped == nil && !c.dropped {
			return nil
		}
	}
	for i := range cands {
		c := &cands[i]
		c.Original, c.Shaped, c.Field = "", "", ""
		if c.can {
			start := req.Messages[c.Message].Start
			c.edit.Start -= start
			c.edit.End -= start
		}
	}
	var changed []int32
	if prior != nil && taken > 0 {
		// The decided blocks are copied as they are (one move, not a
		// block at a time), and so are the indices of those changed.
		all := append(candRoom(taken+len(cands)), prior.cands[:taken]...)
		all = append(all, cands...)
		if cands != nil {
			putCands(cands)
		}
		cands = all
		changed = append(changed, prior.changed[:changedAmong(prior, taken)]...)
	}
	for i := taken; i < len(cands); i++ {
		if cands[i].Changed {
			changed = append(changed, int32(i))
		}
	}
	return &settled{prof: in.prof, rd: rd, batched: in.batched, floor: req.LastSigned(), cands: cands, changed: changed}
}

// release gives the decisions' array back.
func (s *settled) release() {
	if s != nil {
		putCands(s.cands)
		s.cands = nil
	}
}

// settledPrefix returns how many first messages of req take their blocks
// as from decided them (0: none): as long as each is, byte for byte, the
// message from's request had at its place, neither request's last, and
// rendered alike in both (a new user turn moves the boundary a profile
// renders earlier turns by), when what else the decisions depended on is
// the same: the profile (resolved once per route and model), the set of
// blocks shaped at breaks and the last signed message.
// Prints tells whether req's prints are made (those of the messages taken
// are from's). TestSettledPrefixRepeated holds the count to the one made
// message by message.
func settledPrefix(req *conv.Request, in inputs, rd profile.Rendering, from *carry, prints bool) int {
	s := from.decided()
	if s == nil || s.prof != in.prof || !sameSet(s.batched, in.batched) ||
		prints && from.prints.msgs == nil || s.floor != req.LastSigned() {
		return 0
	}
	lim := min(len(from.msgs), len(req.Messages)) - 1
	// The messages req repeats of from's view, byte for byte at their
	// places, are from's, without a look at each (a long history's
	// hundreds are that many reads from memory gone cold since the last
	// request); from there, each is compared by its key.
	k := max(0, min(req.Repeated(from.view), lim))
	for k < lim && from.at(k, &req.Messages[k]) != nil {
		k++
	}
	return rd.AgreeBefore(s.rd, k)
}

// sameSet reports whether a and b are the same map (not merely equal):
// a conversation's set is replaced whenever a block joins it.
func sameSet(a, b map[blockKey]bool) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// settledBefore returns how many of s's blocks are of the first k
// messages (a search: the hold reads few of them).
func settledBefore(s *settled, k int) int {
	return sort.Search(len(s.cands), func(i int) bool { return s.cands[i].Message >= k })
}

// changedAmong returns how many of s's first n blocks went out changed.
func changedAmong(s *settled, n int) int {
	return sort.Search(len(s.changed), func(i int) bool { return int(s.changed[i]) >= n })
}

// settledEdits appends to edits those of the first c changed blocks of
// s, with req's edit ranges: all the request's hold needs of the blocks
// it takes as decided.
func settledEdits(edits []conv.Edit, req *conv.Request, s *settled, c int) []conv.Edit {
	for _, i := range s.changed[:c] {
		e := s.cands[i].edit
		start := req.Messages[s.cands[i].Message].Start
		e.Start += start
		e.End += start
		edits = append(edits, e)
	}
	return edits
}

// takeSettled appends to out the blocks of req's first k messages as s
// decided them, with req's strings and edit ranges, and returns it with
// how many it took.
func takeSettled(out []cand, req *conv.Request, s *settled, k int) ([]cand, int) {
	n := settledBefore(s, k)
	for _, c := range s.cands[:n] {
		c.block = settledBlock(req, &c)
		if c.can {
			start := req.Messages[c.Message].Start
			c.edit.Start += start
			c.edit.End += start
		}
		out = append(out, c)
	}
	return out, n
}

// settledBlock returns the block of a decision taken as decided (c, of
// a settled, for a message req repeats) as req sent it: the message's
// strings, and the text it went out with (the shaped one when it changed).
func settledBlock(req *conv.Request, c *cand) block {
	m := &req.Messages[c.Message]
	b := c.block
	b.Original, b.Field = m.Reasoning, m.ReasoningField
	b.Shaped = b.Original
	if c.can && c.Changed {
		b.Shaped = c.out
	}
	return b
}
