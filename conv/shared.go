package conv

import (
	"bytes"
	"sort"
	"sync/atomic"
	"unsafe"
)

// A long conversation's views share their messages. The Reparser's view
// of a history of minShared messages or more owns its strings (own: they
// are a copy of the messages' bytes, not the body's) and keeps its message
// array in a sharedArray. The next request of the conversation repeats
// those messages at their very places (the same bytes before them): its
// view's Messages is then the head of the same array — the messages are
// not copied, moved or read, whatever their number — and its own new
// messages are appended in place when nobody else did. Each view only
// reads its own head, so views of one array never see each other's
// writes; the first to append past a head claims the room (used), any
// other copies the head into an array of its own.
//
// An agent's request adds a message or two to hundreds: the view of the
// seed's 631 messages, 141 KB of Message structs, was moved message by
// message on every request (rebasing each string onto the new body),
// about 7% of the proxy's CPU time with every feature on.

// minShared is the fewest messages of a view whose array later views
// share. A shorter history's views are copied, as cheap as sharing, and
// their strings stay the body's (no copy).
const minShared = exactBelow

// sharedArray is the message array of the views that share it (Request.arr).
type sharedArray struct {
	// used is how many of its elements views hold (the longest view's
	// count), or claimed while a parse appends past it.
	used atomic.Int64
	// shared is set once a second view holds it: it is then never
	// recycled (one view's release would give it back under another).
	shared atomic.Bool
}

// claimed marks a sharedArray a parse appends to.
const claimed = -1

// share makes r's view, when it is long or already holds a head of a
// sharedArray, one that later views share: its strings from message
// fresh on (those that may be its body's bytes) are copied into memory of
// their own, and its array, unless it is already another view's, gets a
// sharedArray.
func (r *Request) share(fresh int) {
	if r.arr == nil && len(r.Messages) < minShared {
		return
	}
	r.own(fresh)
	if r.arr == nil {
		r.arr = new(sharedArray)
		r.arr.used.Store(int64(len(r.Messages)))
	}
}

// own copies the bytes of each of r's messages from index from on into a
// string of its own and points the message's strings (and its tool
// calls') there, off r.Body: a later view that shares them must not read
// a body its own request does not hold. Strings that are not r.Body's
// (decoded, joined, the package's roles) stay as they are.
//
// One copy a message, not one for them all: a view that takes a few of
// them (a short request read against a long one) keeps only theirs,
// which its own body holds too — the bounds that count a view by its body
// then count what its strings keep.
func (r *Request) own(from int) {
	old := bodyString(r.Body)
	for j := from; j < len(r.Messages); j++ {
		m := &r.Messages[j]
		mem := string(r.Body[m.Start:m.End]) // a copy
		re := func(x string) string { return rebase(x, old, mem, -m.Start) }
		m.Role, m.Name, m.Reasoning, m.Content, m.ToolCallID = re(m.Role), re(m.Name), re(m.Reasoning), re(m.Content), re(m.ToolCallID)
		for k := range m.ToolCalls { // the message's own calls, or this view's moved ones
			tc := &m.ToolCalls[k]
			tc.ID, tc.Type, tc.Name, tc.Arguments = re(tc.ID), re(tc.Type), re(tc.Name), re(tc.Arguments)
		}
	}
}

// unclaim gives back the room past its head that r claimed in prev's
// array (walkShared) when r is not the view made after all (what follows
// the messages failed the parse): its messages there hold strings of its
// body, never copied (own).
//
// A view that claimed holds more than the head it took (walkShared claims
// only for messages after it); one that took the head as it is claimed
// nothing, and the array's count is another view's.
func (r *Request) unclaim(prev *Request) {
	if r.arr == nil || r.arr != prev.arr || len(r.Messages) == r.reused {
		return
	}
	clear(r.Messages[r.reused:])
	r.arr.used.Store(int64(r.reused))
	r.arr = nil
}

// sharedRun returns how many of prev's first messages body holds at their
// very places with the same bytes, the separators between them included
// (the array starting at body[i]), and how many of them lie in its first
// known bytes (the same as prev's by the bodies' keys: not compared).
// The messages after those are compared with prev's, which reads its
// body.
func sharedRun(body []byte, i int, prev *Request, known int) (n, keyed int) {
	pm := prev.Messages
	if len(pm) == 0 || i != pm[0].Start {
		return 0, 0
	}
	n = sort.Search(len(pm), func(j int) bool { return pm[j].End > known })
	keyed = n
	from := pm[0].Start
	if n > 0 {
		from = pm[n-1].End
	}
	for n < len(pm) && pm[n].End < len(body) && bytes.Equal(body[from:pm[n].End], prev.Body[from:pm[n].End]) {
		from = pm[n].End
		n++
	}
	return n, keyed // walkShared checks what follows the last
}

// walkShared is walkMessages for a body that repeats prev's first n
// messages at their places (sharedRun; keyed of them known by the keys):
// the view's messages are the head of prev's array. A body that has
// nothing after them takes the head as it is (a retry, a sibling sent at
// once); one that has more appends them in place when no other view
// appended past that head (it claims the room), else after a copy of it.
func (r *Request) walkShared(body []byte, prev *Request, same *span, n, keyed int) (end int, ok bool) {
	a, pm := prev.arr, prev.Messages
	i := skipSpace(body, pm[n-1].End)
	if i >= len(body) || body[i] != ',' && body[i] != ']' {
		return 0, false
	}
	more := body[i] == ','
	switch {
	case !more:
		a.shared.Store(true) // before prev's body is released: this parse retains it
		r.Messages, r.arr = pm[:n], a
	case n < cap(pm) && a.used.CompareAndSwap(int64(n), claimed):
		a.shared.Store(true)
		r.Messages = pm[:n]
		defer func() {
			inPlace := unsafe.SliceData(r.Messages) == unsafe.SliceData(pm)
			switch {
			case ok && inPlace:
				r.arr = a
				a.used.Store(int64(len(r.Messages)))
			case inPlace:
				clear(pm[n:len(r.Messages)]) // an invalid body's: its strings would hold it
				a.used.Store(int64(n))
			default: // grown into an array of its own
				clear(pm[n:cap(pm)]) // written before it grew
				a.used.Store(int64(n))
			}
		}()
	default:
		r.Messages = append(messageRoom(n+n/8+8), pm[:n]...) // room for a conversation's next messages; more grows it
		clear(r.Messages[n:cap(r.Messages)])                 // a recycled array's room holds an earlier view's messages
	}
	r.reused, r.keyed = n, keyed
	if n == len(pm) {
		r.tally, r.msgDup = prev.tallied(), prev.msgDup
	} else {
		r.tally = newTally()
		for j := range n {
			r.tally.add(r.Messages, j)
			r.msgDup = r.msgDup || r.Messages[j].dup
		}
	}
	same.start, same.end, same.exact = pm[0].Start, pm[n-1].End, pm[n-1].End
	if !more {
		return i + 1, true
	}
	return r.walkFrom(body, skipSpace(body, i+1), n, prev, same, false)
}
