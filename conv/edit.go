package conv

import (
	"bytes"
	"slices"
	"sort"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/shaperproxy/shaperproxy/internal/slicepool"
	"github.com/tidwall/gjson"
)

// Apply returns the view of r's body with edits applied (ApplyEdits: the
// view's Body is a new slice; r is not changed). It is what ParseRequest of
// the new body returns, built from r where the edits allow it rather than
// by parsing the whole body again, so that a transform that edits a long
// history hands the next one its view for the cost of the edits:
//
//   - an edit that replaces a message's reasoning string token (exactly
//     Body[ReasoningStart:ReasoningEnd]) with another JSON string;
//   - an insertion at the end of a message's string content, just before
//     its closing quote (Body[ContentEnd-1]), of a string's inner bytes:
//     text appended to it (the guard's notices);
//   - edits inside one message, its braces kept: that message is read
//     again;
//   - edits inside an object or array that is the value of a top-level
//     key other than "messages", "model" and "stream" (the "tools" array,
//     say): that value is checked again.
//
// Any other edit parses the new body whole. The strings of the view share
// the memory of r's body where they were not edited. Edits must not
// overlap; Apply sorts them.
//
// On a view a Reparser parsed, the body is written over one Apply made
// for an earlier request this one repeats, when that one is no one
// else's (editedBodies): the bytes the two agree on are not copied again.
// So no one may write into a body Apply returned.
func (r *Request) Apply(edits []Edit) (*Request, error) {
	a := r.apply(edits)
	if pieced(a.Body, edits) {
		a.cuts = slices.Clone(edits) // the view keeps them; the caller may reuse its own
	}
	return a.View() // at once: the caller's edits are read before it returns
}

// Applied is the result of ApplyLater: the edited body, and its view once
// View is asked for it.
type Applied struct {
	// Body is r.Body with the edits applied, as Apply's view's Body.
	Body []byte

	r     *Request
	edits []Edit // sorted (ApplyLater's: a copy), until the view is made
	head  derivedHead
	cuts  []Edit // the edits, for Body as pieces of r.Body (AppendPieces; nil: none), kept

	once sync.Once
	view *Request
	err  error
}

// ApplyLater is Apply in two steps: the edited body now, written over an
// earlier one where Apply would, and its view (Apply's) when View is first
// called, from any goroutine. The body's place among the bodies the next
// requests are written over is taken with the view (editedBodies.keep):
// call View before the body goes back. A proxy that has the body to send
// at once and the view to read only once the request is on its way
// (its observers, its capture) makes the view beside the trip upstream
// instead of in the request's hold.
func (r *Request) ApplyLater(edits []Edit) *Applied {
	a := r.apply(edits)
	a.edits = append([]Edit(nil), a.edits...) // View may come after the caller reused its edits
	if pieced(a.Body, a.edits) {
		a.cuts = a.edits // the copy, which View lets go of but the pieces keep
	}
	return a
}

// apply is ApplyLater reading the caller's edits, sorted in place, when
// View comes.
func (r *Request) apply(edits []Edit) *Applied {
	sortEdits(edits)
	a := &Applied{r: r, edits: edits}
	ok := false
	if r.edited != nil {
		a.Body, a.head, ok = r.edited.writeOver(r, edits)
	}
	if !ok {
		a.Body = ApplyEdits(r.Body, edits)
	}
	return a
}

// View returns the view of a.Body, made on the first call: derived from
// the view the edits were applied to, else parsed; an error when the
// edited body does not parse.
func (a *Applied) View() (*Request, error) {
	a.once.Do(func() {
		r, body, edits := a.r, a.Body, a.edits
		v, ok := r.derive(body, edits, a.head)
		if !ok {
			if v, a.err = ParseRequest(body); a.err != nil {
				return
			}
		}
		if r.edited != nil {
			r.edited.keep(r, body, edits, v)
		}
		if v.cuts = a.cuts; v.cuts != nil {
			v.from = r.Body
		}
		a.view, a.edits, a.head = v, nil, derivedHead{}
	})
	return a.view, a.err
}

// AppendPieces is Request.AppendPieces of the view to be: a.Body as
// pieces of from appended to dst when from is the body the edits were
// applied to (ok false otherwise), without making the view.
func (a *Applied) AppendPieces(dst [][]byte, from []byte) (_ [][]byte, ok bool) {
	if a.cuts == nil || !sameSlice(from, a.r.Body) {
		return dst, false
	}
	return appendPieces(dst, from, a.Body, a.cuts), true
}

// editPlan says what each edit of Apply does to the view.
type editPlan struct {
	msg       []int8 // per message: 0 unchanged, 1 its reasoning replaced, 2 read again, 3 text appended to its content
	reasoning []int  // per message: the edit of case 1 or 3
	field     []bool // per top-level member: its value is checked again
	reread    bool   // some message is read again (its tool calls may change)
}

// derive builds the view of body (r.Body with the sorted edits applied)
// from r; ok is false when an edit is not one derive handles, or the
// edited parts are not valid.
//
// head (none: its zero value) is the message array of the view of an
// earlier body that body was written over, its first messages those the
// view of body would have (editedBodies.writeOver): they are neither
// copied nor derived again, and the array is the view's when it has the
// room.
func (r *Request) derive(body []byte, edits []Edit, h derivedHead) (*Request, bool) {
	head := h.msgs
	plan, ok := r.plan(edits)
	defer plan.release()
	if !ok {
		return nil, false
	}
	sh := shifter{edits: edits}
	n := &Request{Body: body, Model: r.Model, Stream: r.Stream, msgDup: r.msgDup, derived: true}
	n.lin = lineage{body: viewIDs.Add(1), base: h.over, same: h.same}
	n.owned = r.arr != nil && !plan.reread // and every reasoning it puts in is an edit's text (below)
	n.fields = make([]Field, len(r.fields))
	for i, f := range r.fields {
		// The member ranges come in body order, as the shifter needs.
		n.fields[i] = Field{Key: f.Key, Start: sh.at(f.Start), End: sh.at(f.End), key: f.key}
	}
	sh = shifter{edits: edits}
	s := bodyString(body)
	from := len(head)
	if cap(head) >= len(r.Messages) && cap(head) <= 2*len(r.Messages)+16 { // not a long view's array for a short one
		n.Messages = head[:len(r.Messages)] // every element from len(head) on written below
	} else {
		// Every element written below. With room for the next request's
		// messages when the array may go on with the body (keep).
		room := len(r.Messages)
		if r.arr != nil {
			room += room/8 + 8
		}
		n.Messages = messageRoom(room)[:len(r.Messages)]
		copy(n.Messages, head)
	}
	// The edits Apply makes in place change no role, tool call or
	// signature: the tally is r's, its strings' bytes moved by the edits
	// (a message read again is folded anew, below). Folding each message
	// again would read its role from the new body, cold by then.
	n.tally = r.tallied()
	if h.whole {
		n.tally.strBytes += h.grow // what the head's edits added, known
	} else {
		for i := range from { // the head's edited messages: only what they hold
			switch plan.msg[i] {
			case 1:
				n.tally.strBytes += len(head[i].Reasoning) - len(r.Messages[i].Reasoning)
			case 3:
				n.tally.strBytes += len(head[i].Content) - len(r.Messages[i].Content)
			}
		}
	}
	for i := from; i < len(r.Messages); i++ {
		m := &n.Messages[i] // written in place: copied once
		*m = r.Messages[i]
		start, end := sh.at(m.Start), sh.at(m.End)
		switch plan.msg[i] {
		case 1:
			e := edits[plan.reasoning[i]]
			if !e.known && !validString(e.Repl) {
				return nil, false
			}
			// The message's one edit replaces its reasoning token.
			m.moveInner(start-m.Start, m.ReasoningStart, len(e.Repl)-(m.ReasoningEnd-m.ReasoningStart))
			was := len(m.Reasoning)
			if e.known {
				m.Reasoning = e.text // the token's text (String): no decoding
			} else {
				n.owned = false // the edited body's bytes
				m.Reasoning = gjson.Parse(s[m.ReasoningStart:m.ReasoningEnd]).Str
			}
			n.tally.strBytes += len(m.Reasoning) - was
			m.Start, m.End = start, end
			m.key = rawKeyString(s[start:end])
		case 3:
			e := edits[plan.reasoning[i]]
			add, ok := appended(e.Repl)
			if !ok {
				return nil, false
			}
			m.moveInner(start-m.Start, m.ContentEnd-1, len(e.Repl)) // inserted before the closing quote
			m.Content += add
			n.tally.strBytes += len(add)
			m.Start, m.End = start, end
			m.key = rawKeyString(s[start:end])
		case 2:
			elem := body[start:end]
			if r.msgDup || !utf8.Valid(elem) || !valid(elem, MaxDepth-2) {
				return nil, false
			}
			v := gjson.Parse(s[start:end])
			v.Index = start
			*m = parseMessage(i, v, &n.msgDup)
		default:
			m.shift(start - m.Start)
		}
	}
	if plan.reread {
		if n.tally = tallyOf(n.Messages); n.tally.calls > MaxToolCalls { // a message read again may have another role or calls
			return nil, false // more calls: ParseRequest says why
		}
	}
	for i, f := range n.fields {
		if !plan.field[i] {
			continue
		}
		if !(utf8.Valid(body[f.Start:f.End]) && valid(body[f.Start:f.End], MaxDepth-1)) {
			return nil, false
		}
		n.fields[i].key = fieldKey(f.Key, s[f.Start:f.End])
	}
	n.DuplicateKeys = r.DuplicateKeys && !r.msgDup || n.msgDup
	return n, true
}

// planKinds and planEdits are the per-message arrays of the plans of
// earlier requests, for the next (a long history's are kilobytes, garbage
// once its view is derived).
var (
	planKinds slicepool.Pool[int8]
	planEdits slicepool.Pool[int]
)

// release gives the plan's per-message arrays back.
func (p *editPlan) release() {
	planKinds.Put(p.msg)
	planEdits.Put(p.reasoning)
	p.msg, p.reasoning = nil, nil
}

// plan classifies the edits (sorted) by what they touch.
func (r *Request) plan(edits []Edit) (editPlan, bool) {
	n := len(r.Messages)
	p := editPlan{msg: planKinds.Get(n, 4*n+16)[:n], reasoning: planEdits.Get(n, 4*n+16)[:n], field: make([]bool, len(r.fields))}
	clear(p.msg) // reasoning is read only where msg is set
	mi := 0
	for k, e := range edits {
		// The first message that ends after the edit's start, found by
		// halving rather than by a walk that reads every message before
		// it: a line of memory each, cold when a request comes.
		mi += sort.Search(len(r.Messages)-mi, func(j int) bool { return r.Messages[mi+j].End > e.Start })
		if mi < len(r.Messages) && r.Messages[mi].Start < e.Start && e.End < r.Messages[mi].End {
			m := &r.Messages[mi]
			switch {
			case p.msg[mi] == 0 && m.ReasoningStart >= 0 && e.Start == m.ReasoningStart && e.End == m.ReasoningEnd:
				p.msg[mi], p.reasoning[mi] = 1, k
			case p.msg[mi] == 0 && m.ContentIsString && m.ContentStart >= 0 && e.Start == m.ContentEnd-1 && e.End == e.Start &&
				(k+1 == len(edits) || edits[k+1].Start >= r.Messages[mi].End):
				p.msg[mi], p.reasoning[mi] = 3, k // the message's only edit
			default:
				p.msg[mi], p.reread = 2, true
			}
			continue
		}
		f := r.fieldAround(e)
		if f < 0 {
			return p, false
		}
		p.field[f] = true
	}
	return p, true
}

// fieldAround returns the top-level member whose value, an object or an
// array that the view does not read, holds e strictly inside; -1 when
// there is none.
func (r *Request) fieldAround(e Edit) int {
	for i, f := range r.fields {
		if f.Start < e.Start && e.End < f.End {
			switch f.Key {
			case "messages", "model", "stream":
				return -1
			}
			if c := r.Body[f.Start]; c != '{' && c != '[' {
				return -1
			}
			return i
		}
	}
	return -1
}

// appended returns the text inner, the inner bytes of a JSON string
// (what lies between its quotes), decodes to, and whether it is such. An
// insertion that starts with a \u escape is refused: it may be the low
// half of a surrogate pair whose high half ends the content, which a
// decoder joins only when it reads the two together.
func appended(inner []byte) (string, bool) {
	if bytes.HasPrefix(inner, []byte(`\u`)) {
		return "", false
	}
	tok := make([]byte, 0, len(inner)+2)
	tok = append(append(append(tok, '"'), inner...), '"')
	if !validString(tok) {
		return "", false
	}
	return gjson.ParseBytes(tok).Str, true
}

// validString reports whether b is exactly one JSON string token.
func validString(b []byte) bool {
	return len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' && utf8.Valid(b) && valid(b, MaxDepth)
}

// shifter maps offsets of the old body to the new one, for offsets
// asked in increasing order that no edit spans.
type shifter struct {
	edits []Edit
	k     int // edits ending at or before the last offset asked
	delta int // their size change
}

// at returns where old offset x is in the new body.
func (s *shifter) at(x int) int {
	for s.k < len(s.edits) && s.edits[s.k].End <= x {
		e := s.edits[s.k]
		s.delta += len(e.Repl) - (e.End - e.Start)
		s.k++
	}
	return x + s.delta
}

// shift moves every byte range of m by d.
func (m *Message) shift(d int) {
	if d == 0 {
		return // a conversation's history stays where it was
	}
	m.Start += d
	m.End += d
	m.moveInner(d, 0, 0)
}

// moveInner moves the ranges inside m (its reasoning's, its content's) by
// d, and by grow more each position after at: an edit at at inside the
// message changed its size by grow. Start and End are the caller's.
func (m *Message) moveInner(d, at, grow int) {
	m.ReasoningStart = moveInside(m.ReasoningStart, d, at, grow)
	m.ReasoningEnd = moveInside(m.ReasoningEnd, d, at, grow)
	m.ContentStart = moveInside(m.ContentStart, d, at, grow)
	m.ContentEnd = moveInside(m.ContentEnd, d, at, grow)
}

// moveInside is moveInner for one offset x (negative: no such range).
func moveInside(x, d, at, grow int) int {
	switch {
	case x < 0:
		return x
	case x > at:
		return x + grow + d
	}
	return x + d
}

// messageArrays are the message arrays of views given back (Recycle), for
// the next views: a long history's is a hundred kilobytes or more.
var messageArrays slicepool.Pool[Message]

// minRecycled is the fewest messages whose array is recycled: about
// where an array becomes one of the runtime's large allocations (32 KB),
// cleared on allocation. Smaller arrays are neither given back nor taken
// from the pool, so short requests pay nothing for it and the pool holds
// the arrays that are worth it.
const minRecycled = 128

// messageArray returns an array of n messages whose elements the caller
// writes all of (a recycled one holds an earlier view's). A recycled
// array more than twice as large as needed is not taken (a view keeps
// its array, and the bounds that count views count its room): it goes
// back for a longer history.
func messageArray(n int) []Message {
	if n < minRecycled {
		return make([]Message, n)
	}
	return messageArrays.Get(n, 2*n)[:n]
}

// messageRoom returns an empty array with room for n messages, recycled
// when one fits (messageArray): the Reparser's views append to it. The
// room past what the caller appends may hold an earlier view's messages:
// the caller clears it.
func messageRoom(n int) []Message {
	return messageArray(n)[:0]
}

// Recycle gives the message array of a view Apply made back, for the next
// view Apply makes, when nothing will read r again: the owner of a call's
// views does so when the call's bodies, which the views alias, go back.
// Other views, and arrays under minRecycled messages, are left alone.
// r's Messages are nil afterwards; in a test
// binary the array given back is overwritten first, so that a reader who
// kept it reads garbage.
func (r *Request) Recycle() {
	if r.derived {
		r.cuts, r.from = nil, nil // the body it was edited from goes back with the call
		r.recycle()
	}
}

// recycle gives r's message array back (Recycle), whoever made it,
// unless later views share it (sharedArray). The array of the tool calls
// the Reparser moved (Request.callArray) is left to the collector: the
// copies of the messages that point into it, in a view that copied a
// shared head or a view Apply derived (which the edited bodies' table
// keeps, editedBodies.keep), may outlive r.
func (r *Request) recycle() {
	if r.arr != nil && r.arr.shared.Load() || cap(r.Messages) < minRecycled {
		return
	}
	ms := r.Messages[:cap(r.Messages)]
	r.Messages, r.tally = nil, tally{}
	if poisonViews {
		for i := range ms {
			ms[i] = Message{Role: poisonRole, Start: -1, End: -1, ReasoningStart: -1, ReasoningEnd: -1, ContentStart: -1, ContentEnd: -1}
		}
	}
	messageArrays.Put(ms)
}

// poisonViews is set in test binaries (Recycle).
var poisonViews = testing.Testing()

// poisonRole is the role of a recycled message in a test binary.
const poisonRole = "\xa5recycled"
