package conv

import (
	"sort"
	"unsafe"
)

// tally is what the proxy's hooks ask of a view's messages on every
// request — how many turns it has and where the open one starts (the
// originals' turns, the shaper), its last signed message (the shaper's
// floor), its tool calls and the memory its strings and calls hold (the
// limits, the Reparser's and the capture's bounds) — folded in as each message is placed: by
// ParseRequest, the Reparser's walk and Apply's derive, while the message
// is in the cache. Asked afterwards, each question was a pass of its own
// over the history, reading 224 bytes a message from memory (141 KB for
// a 631-message history, four times a request).
type tally struct {
	ok bool // folded over every message of the view (one made as a literal is not)
	// turns, turnStart and turnLast follow the turn rules of Turns: the
	// turns, the message that opened the last one and its last assistant
	// message (-1: none yet).
	turns, turnStart, turnLast int
	lastSigned                 int // the last message with Signed, -1: none
	// The last user message, the last user or tool message, and the
	// last assistant message without tool calls (-1: none): where a
	// chat template's rendering of earlier turns begins (profile's
	// boundaries), which a pass would find walking back over a long
	// turn's history.
	lastUser, lastUserOrTool, lastFinal int
	calls                               int // the messages' tool calls (MaxToolCalls; room for the next view's)
	strBytes                            int // the messages' strings and tool calls (viewBytes)
}

// newTally returns the tally of no messages.
func newTally() tally {
	return tally{ok: true, turnLast: -1, lastSigned: -1, lastUser: -1, lastUserOrTool: -1, lastFinal: -1}
}

// add folds msgs[i] in; msgs[:i] were folded before, in order.
func (t *tally) add(msgs []Message, i int) {
	m := &msgs[i]
	switch {
	case m.Role == RoleUser && (t.turns == 0 || t.turnLast < 0 || len(msgs[t.turnLast].ToolCalls) == 0):
		t.turns, t.turnStart, t.turnLast = t.turns+1, i, -1
	case t.turns > 0 && m.Role == RoleAssistant:
		t.turnLast = i
	}
	if m.Signed {
		t.lastSigned = i
	}
	switch m.Role {
	case RoleUser:
		t.lastUser, t.lastUserOrTool = i, i
	case RoleTool:
		t.lastUserOrTool = i
	case RoleAssistant:
		if len(m.ToolCalls) == 0 {
			t.lastFinal = i
		}
	}
	t.calls += len(m.ToolCalls)
	t.strBytes += messageBytes(m)
}

// messageBytes is the memory m's strings and tool calls hold (counted as
// if decoded: most alias the body).
func messageBytes(m *Message) int {
	n := len(m.Reasoning) + len(m.Content) + len(m.ToolCalls)*int(unsafe.Sizeof(ToolCall{}))
	for _, tc := range m.ToolCalls {
		n += len(tc.Arguments)
	}
	return n
}

// tallyOf folds msgs in one pass.
func tallyOf(msgs []Message) tally {
	t := newTally()
	for i := range msgs {
		t.add(msgs, i)
	}
	return t
}

// tallied returns r's tally: the one folded as its messages were placed,
// or, for a view not made by this package's constructors, a pass.
func (r *Request) tallied() tally {
	if r.tally.ok {
		return r.tally
	}
	return tallyOf(r.Messages)
}

// LastSigned returns the index of the last message carrying signed or
// encrypted reasoning (Message.Signed), or -1 when none does: nothing up
// to it may change (PROTOCOLS.md rule 2).
func (r *Request) LastSigned() int { return r.tallied().lastSigned }

// LastUser returns the index of the last user message, or -1.
func (r *Request) LastUser() int { return r.tallied().lastUser }

// LastUserOrTool returns the index of the last user or tool message, or -1.
func (r *Request) LastUserOrTool() int { return r.tallied().lastUserOrTool }

// LastFinal returns the index of the last assistant message without tool
// calls (one that ended a turn), or -1.
func (r *Request) LastFinal() int { return r.tallied().lastFinal }

// ID returns the number a Reparser gave the view (unique in the process),
// or 0 for a view no Reparser parsed (ParseRequest's, Apply's).
func (r *Request) ID() uint64 { return r.id }

// Repeats reports whether r's first n messages are, byte for byte and at
// the same places, the first n messages of the view numbered id (ID): the
// Reparser read r against that view and compared them (or their bodies'
// keys, ParseKeyed). A hook that kept
// what it found in an earlier request's messages can then go on from
// there instead of reading the history again, or hashing it to find out
// whether it is the same. False when the Reparser did not read r against
// that view, or when n reaches past what the two share.
func (r *Request) Repeats(id uint64, n int) bool {
	return id != 0 && r.base == id && n >= 0 && n <= len(r.Messages) && (n == 0 || r.Messages[n-1].End <= r.same)
}

// Lineage numbers r's body and names an earlier body its first bytes
// repeat. body is unique in the process (0: not numbered); when base is
// not 0, the first same bytes of r.Body are, at the same places, those
// of the body numbered base. A Reparser's view is numbered by its ID and
// repeats the view it was read against; a view Apply made is numbered
// too, and repeats the earlier edited body its body was written over as
// far as the two agree (editedBodies.writeOver). A reader that kept what
// it found in an earlier body (the capture's spans of each message) can
// take that for the bytes the two share instead of reading them again.
func (r *Request) Lineage() (body, base uint64, same int) {
	if r.id != 0 {
		return r.id, r.base, r.same
	}
	return r.lin.body, r.lin.base, r.lin.same
}

// lineage is a derived view's Lineage.
type lineage struct {
	body, base uint64
	same       int
}

// Repeated returns how many first messages r repeats of the view numbered
// id, the most n for which Repeats(id, n) holds: found by the messages'
// ends, without reading each (a long history has hundreds). 0 when the
// Reparser did not read r against that view.
func (r *Request) Repeated(id uint64) int {
	if id == 0 || r.base != id {
		return 0
	}
	return sort.Search(len(r.Messages), func(i int) bool { return r.Messages[i].End > r.same })
}
