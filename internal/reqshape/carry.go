package reqshape

import (
	"sync"
	"sync/atomic"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/slicepool"
)

// A carry is what the shaper found for each message of a conversation's
// last request, for the next one: an agent re-sends its history with every
// request, and each message found again at its place, with the same bytes
// (the same conv.RawKey), gives the same shaped text, the same token
// estimate and the same print parts, and the same print when it goes out
// the same way. Taking them from the carry costs a comparison of keys a
// message, where the memos cost a lookup under their lock a message and a
// block (BenchmarkSeedShapeCarried). What is decided (which blocks go out
// shaped, what is rendered, where the prompt breaks) is decided anew for
// every request; only what follows from a message's bytes and the rule is
// carried. A carry never changes a result (TestCarryChangesNothing).
//
// A carry is immutable once made; the table hands it out counted, and its
// array goes back to a pool when the last holder lets it go.
type carry struct {
	rule shapeRule // what the texts were shaped under
	msgs []carried // by message index
	// view is the number of the view it was made from (conv.Request.ID;
	// 0: none): a request the Reparser read against that view says how
	// many first messages it repeats of it (conv.Request.Repeated), each
	// of them one the carry has at its place, with the same bytes.
	view uint64
	// settled are its request's decisions (nil: not to be taken), and
	// prints its messages' prints as they went out (nil msgs: not made; a
	// message's is taken only where it is printed): the request's own,
	// which no one changes once made (the next request's extend its
	// array in place: prints.extend).
	settled *settled
	prints  prints
	refs    atomic.Int32
}

// carried is one message of a carry.
type carried struct {
	key conv.RawKey // the message's bytes; the zero key (a view made by hand) matches none
	// parts are the message's print parts (hasParts: when they were made).
	parts    partPrints
	hasParts bool
	// shaped is the memo's entry of its reasoning field's block, when
	// shaping was asked for it (the block was allowed): the shaped text
	// and its token, the memo's own (never the body's memory), which do
	// not change. after is the block's token estimate of what follows it
	// (cand.after), set when the message has a block.
	shaped *memoEntry
	after  int32
	// Whether the message carries the print it went out with (printed:
	// the carry's prints hold it), and what that depended on besides the
	// message's bytes: whether the message was counted as rendered and
	// how its reasoning went (sent). A message with a <think> block
	// carries no print.
	printed, rendered bool
	sent              sentAs
}

// sentAs is how a message's reasoning field went out: as the client sent
// it, shaped (the same text for the same bytes and rule), or dropped
// (which the drop operation does only where the request declares no
// tools: the same bytes and rule go out either way).
type sentAs uint8

const (
	sentRaw sentAs = iota
	sentShaped
	sentDropped
)

// sentOf is how c's block goes out.
func sentOf(c *cand) sentAs {
	switch {
	case !c.Changed:
		return sentRaw
	case c.dropped:
		return sentDropped
	}
	return sentShaped
}

// at returns the carried message i of the request, when c has it with the
// same bytes (nil otherwise, and for a nil c).
func (c *carry) at(i int, m *conv.Message) *carried {
	if c == nil || i >= len(c.msgs) {
		return nil
	}
	if k := m.RawKey(); k != (conv.RawKey{}) && c.msgs[i].key == k {
		return &c.msgs[i]
	}
	return nil
}

var carriedArrays slicepool.Pool[carried]

// newCarry returns a carry of n messages (each to be written) under rule,
// held once (by the table it is put in).
func newCarry(rule shapeRule, n int) *carry {
	c := &carry{rule: rule, msgs: room(&carriedArrays, n)[:n]}
	c.refs.Store(1)
	return c
}

// release lets c go; its array goes back with the last holder's release.
func (c *carry) release() {
	if c != nil && c.refs.Add(-1) == 0 {
		giveBack(&carriedArrays, c.msgs)
		c.settled.release()
		c.msgs, c.settled, c.prints = nil, nil, prints{}
	}
}

// decided returns the decisions c keeps (nil for a nil c, or none).
func (c *carry) decided() *settled {
	if c == nil {
		return nil
	}
	return c.settled
}

// carries holds the carries of the last two requests of each
// conversation, within maxCarried messages in all (a carry is only a
// shortcut: one that goes costs its conversation's next request the
// memos' lookups). Two, because a request is read against the view of
// the conversation's request before the last as often as the last's
// (conv's closest takes the older of two equal copies, and requests sent
// at once are read against the same one): the carry made from the very
// view the request was read against gives its repeated history without a
// look at each message (settledPrefix). It is safe for concurrent use.
type carries struct {
	mu   sync.Mutex
	by   map[string][2]*carry // newest first
	msgs int
	max  int
}

// maxCarried bounds the messages all carries hold (each ~72 bytes): as
// many as the memo's entries, so that the entries the carries keep alive
// after the memo let them go (a message has one at most) are never more
// than the memo itself holds. Their decisions (settled, made without
// <think> blocks: one block a message at most) add a candidate of ~200
// bytes a block, in an array the pool may have made up to four times too
// large: 14 MB at the very most. minCarried is the shortest request that
// makes one: a few messages cost less to look up than a carry costs to
// make and keep.
const (
	maxCarried = memoEntries
	minCarried = 16
)

func newCarries(max int) *carries { return &carries{by: map[string][2]*carry{}, max: max} }

// get returns the carry of conversation k made from the view numbered
// base (the one its request was read against: conv.Request.Lineage),
// else its newest (nil: none), held: release it.
func (t *carries) get(k string, base uint64) *carry {
	if t == nil || k == "" {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	two := t.by[k]
	c := two[0]
	if base != 0 && two[1] != nil && two[1].view == base {
		c = two[1]
	}
	if c != nil {
		c.refs.Add(1)
	}
	return c
}

// put makes c the newest carry of conversation k, the one before it the
// older and the older before it gone, and keeps the carries within the
// bound: k's older goes when the two do not fit in it, then other
// conversations' carries. It takes over the caller's hold of c.
func (t *carries) put(k string, c *carry) {
	if t == nil || k == "" || c == nil {
		c.release()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	two := t.by[k]
	delete(t.by, k)
	for _, o := range two {
		if o != nil {
			t.msgs -= len(o.msgs)
		}
	}
	two[1].release() // the older goes
	prev := two[0]
	if len(c.msgs) > t.max { // too long to keep: the conversation keeps none
		prev.release()
		c.release()
		return
	}
	if prev != nil && len(c.msgs)+len(prev.msgs) > t.max {
		prev.release()
		prev = nil
	}
	t.keep(k, [2]*carry{c, prev})
	for k2 := range t.by { // the two are within the bound: the others' going is enough
		if t.msgs <= t.max {
			break
		}
		if k2 != k {
			t.drop(k2)
		}
	}
}

// keep records two as k's carries (t.mu held; k has none).
func (t *carries) keep(k string, two [2]*carry) {
	t.by[k] = two
	for _, c := range two {
		if c != nil {
			t.msgs += len(c.msgs)
		}
	}
}

// drop lets k's carries go (t.mu held; none: nothing).
func (t *carries) drop(k string) {
	two, ok := t.by[k]
	if !ok {
		return
	}
	delete(t.by, k)
	for _, c := range two {
		if c != nil {
			t.msgs -= len(c.msgs)
			c.release()
		}
	}
}

// entry returns the memo's entry carried for the message's reasoning
// block (nil for a nil pc, or when none was asked for).
func (pc *carried) entry() *memoEntry {
	if pc == nil {
		return nil
	}
	return pc.shaped
}
