package conv

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"
	"unicode/utf8"
	"unsafe"
	"weak"

	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/tidwall/gjson"
	"github.com/zeebo/xxh3"
)

// Reparser parses requests as ParseRequest does, reusing what it parsed
// of a recent request that the new one repeats. An agent sends its whole
// history with every request; a history of 600 messages and a megabyte
// takes milliseconds to validate and parse, and all but its last few
// messages are the previous request's, byte for byte. A message found
// again at the same place, with the same bytes, is neither validated nor
// parsed again: its view is the earlier one's, moved to its new place.
//
// The result is exactly ParseRequest's (the same view, the same error):
// the earlier request is only a guess, checked byte for byte. It is found
// by a hash of the body's first bytes (the model and the system prompt,
// for most clients), so a conversation's requests find each other without
// the conversation key, which needs the parse; among the last requests of
// that beginning (up to maxPerBeginning: the conversations of one agent
// share its system prompt), the one whose last message the body repeats
// is taken. A
// Reparser keeps them within a memory bound. It is safe for concurrent
// use.
//
// A body it keeps that is a buffer of internal/bigbuf is retained while
// kept (and while a parse reads it), and released when it goes: the
// caller may release its own reference when its request ends.
type Reparser struct {
	seed     maphash.Seed
	maxBytes int

	mu     sync.Mutex
	recent map[uint64][]*Request
	bytes  int

	edited *editedBodies // the bodies Apply edited from its views

	// What Parse did: bodies parsed, of them read against an earlier
	// request, and their messages taken from it or parsed.
	// Each a counter of its own: a sum or difference of two read one
	// after the other could go down between two reads of the stats.
	repeated, whole, reused, fresh, keyed atomic.Int64
}

// ReparseStats counts what a Reparser did since it was made.
type ReparseStats struct {
	// Repeated is the bodies read against an earlier request that they
	// repeat some messages of; New the others parsed (whole, or not chat
	// requests at all).
	Repeated, New int64
	// Reused is the messages taken from an earlier request's view, Parsed
	// those validated and parsed. Keyed is the reused messages taken on
	// the two bodies' keys (ParseKeyed), not compared.
	Reused, Parsed, Keyed int64
	// WrittenOver is the edited bodies (Request.Apply on a view of this
	// Reparser, of 64 KiB and more) written over a body edited for an
	// earlier request; Fresh those that found none to write over (a
	// conversation's first, and any too large for the table to keep).
	WrittenOver, Fresh int64
	// Kept is the bytes of those bodies that were already in the body
	// written over (the history the two requests share, edited alike),
	// Written the bytes written: a body written over counts as such even
	// when nothing of it could be kept.
	Kept, Written int64
}

// Stats returns what the Reparser did so far.
func (p *Reparser) Stats() ReparseStats {
	return ReparseStats{
		Repeated: p.repeated.Load(), New: p.whole.Load(),
		Reused: p.reused.Load(), Parsed: p.fresh.Load(), Keyed: p.keyed.Load(),
		WrittenOver: p.edited.over.Load(), Fresh: p.edited.fresh.Load(),
		Kept: p.edited.kept.Load(), Written: p.edited.written.Load(),
	}
}

// count adds r's parse to the stats.
func (p *Reparser) count(r *Request) {
	switch {
	case r == nil:
		p.whole.Add(1)
		return
	case r.reused == 0:
		p.whole.Add(1)
	default:
		p.repeated.Add(1)
	}
	p.reused.Add(int64(r.reused))
	p.keyed.Add(int64(r.keyed))
	p.fresh.Add(int64(len(r.Messages) - r.reused))
}

// maxPerBeginning is how many recent requests a Reparser keeps of one
// beginning: the conversations that share it and run at once — one agent's
// system prompt, for every conversation a team's gateway serves of it
// (finding the right one costs a comparison of one message each; the
// memory bound applies to them all).
const maxPerBeginning = 64

// reparseKeyBytes is how much of the body's beginning finds the earlier
// request.
const reparseKeyBytes = 2048

// NewReparser returns a Reparser keeping views of at most maxBytes in all
// (bodies and what the views hold besides, heldBytes), and as much again
// of the bodies Request.Apply edited from them (editedBodies).
func NewReparser(maxBytes int) *Reparser {
	return &Reparser{seed: maphash.MakeSeed(), maxBytes: maxBytes, recent: make(map[uint64][]*Request), edited: newEditedBodies(maxBytes)}
}

// viewIDs numbers the views Reparsers parse, across all of them (Request.ID).
var viewIDs atomic.Uint64

// Parse returns ParseRequest(body).
func (p *Reparser) Parse(body []byte) (*Request, error) { return p.ParseKeyed(body, BodyKeys{}) }

// ParseKeyed returns ParseRequest(body), given the keys of body's blocks
// taken as it was read (BodyKeys): the view keeps them, and the bytes its
// keys share with the earlier request's from the start are not compared
// again (only those after are). Keys of another body make a wrong view.
func (p *Reparser) ParseKeyed(body []byte, keys BodyKeys) (*Request, error) {
	var s parseSettle // on the stack: settled here
	r, err := p.parseInto(&s, body, keys)
	s.run()
	return r, err
}

// ParseKeyedLater is ParseKeyed leaving to settle what only later
// requests read: the view kept for them to be read against, its place
// among the bases of the edited bodies (editedBodies.link), its message
// array's return with the body. The caller calls settle exactly once,
// before it lets go of body (a proxy, beside the request's trip upstream,
// off its hold); until then the next requests are read against the views
// before this one, and the earlier bodies this parse read stay held.
// settle is nil for a body under bigbuf.MinSize: its bookkeeping is a
// few map writes, done at once, without the half kilobyte a settle
// left for later takes.
func (p *Reparser) ParseKeyedLater(body []byte, keys BodyKeys) (r *Request, settle func(), err error) {
	if len(body) < bigbuf.MinSize {
		r, err = p.ParseKeyed(body, keys)
		return r, nil, err
	}
	s := new(parseSettle)
	r, err = p.parseInto(s, body, keys)
	return r, s.run, err
}

// parseInto is ParseKeyedLater's parse, leaving its bookkeeping in s.
func (p *Reparser) parseInto(s *parseSettle, body []byte, keys BodyKeys) (r *Request, err error) {
	s.p, s.body = p, body
	s.k = maphash.Bytes(p.seed, body[:min(len(body), reparseKeyBytes)])
	p.mu.Lock()
	cands := append(s.cands[:0], p.recent[s.k]...) // a copy: keep changes the lists in place
	for _, c := range cands {
		bigbuf.Retain(c.Body) // read below and by settle, after another parse may have let it go
	}
	p.mu.Unlock()
	s.n = len(cands)
	s.prev = closest(cands, body)
	r, err = parseKeyed(body, keys.keys, s.prev)
	p.count(r)
	if err == nil {
		r.edited, r.id = p.edited, viewIDs.Add(1)
		r.heldBytes() // computed before the view is shared
		s.r = r
	}
	return r, err
}

// parseSettle is what ParseKeyedLater leaves to do (run).
type parseSettle struct {
	p     *Reparser
	k     uint64
	cands [maxPerBeginning]*Request // retained by the parse
	n     int
	prev  *Request // the view r was read against (nil: none)
	r     *Request // nil: the parse failed
	body  []byte
}

func (s *parseSettle) run() {
	p, r, prev := s.p, s.r, s.prev
	defer func() {
		for _, c := range s.cands[:s.n] {
			bigbuf.Release(c.Body)
		}
	}()
	if r == nil {
		return
	}
	p.edited.link(r)
	if cap(r.Messages) >= minRecycled {
		// The view lives as long as the body it aliases: its array goes
		// back with the body's last release (the call's, the capture's,
		// this cache's), for the next view. Reached through a weak
		// pointer: the function bigbuf keeps must not keep the body (the
		// view's strings alias it) from the collector, which gives back
		// a body whose holder never released it.
		wv := weak.Make(r)
		bigbuf.OnRelease(s.body, func() {
			if v := wv.Value(); v != nil {
				v.recycle()
			}
		})
	}
	if r.heldBytes() > p.maxBytes/4 {
		return
	}
	if !follows(r, prev) {
		prev = nil // another conversation with the same beginning: r is kept beside it
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keep(s.k, prev, r)
}

// follows reports whether r carries all of prev's messages (its last one
// at the same place, with the same bytes): the next request of prev's
// conversation, which takes its place.
func follows(r, prev *Request) bool {
	if prev == nil || len(prev.Messages) == 0 || len(r.Messages) < len(prev.Messages) {
		return false
	}
	j := len(prev.Messages) - 1
	a, b := &prev.Messages[j], &r.Messages[j]
	return bytes.Equal(prev.Body[a.Start:a.End], r.Body[b.Start:b.End])
}

// closest returns the candidate body most likely repeats: one whose last
// message body holds at the same place (the one with most messages when
// several do, the first kept of those), else the most recent. Only a
// guess, checked by the parse byte for byte; it costs a comparison of one
// message per candidate.
//
// Among equals (a request sent again while its first sending was in
// flight leaves two) the older is taken, and the conversation's requests
// then go on read against the view two requests back. Taking the newest
// was tried twice (sessions BH and BM: internal/bench/HISTORY.md): the
// hooks that go on from the previous request's view (the shaper's
// settled prefix, the restorer, the guard's fold) took it at once, but
// the newest request's edited body is often still held by its own call
// under load: the seed's edited bodies were written over the previous
// ones' only 58–60% of the time in the cost section's runs, against
// 99.8–99.9%.
// The restorer and the guard keep records of the requests before the
// last for this (TestCleanFromTwoBack, TestProjectionTwoBack).
func closest(cands []*Request, body []byte) *Request {
	var best *Request
	for _, c := range cands {
		if len(c.Messages) == 0 || best != nil && len(c.Messages) <= len(best.Messages) {
			continue
		}
		m := &c.Messages[len(c.Messages)-1]
		if m.End <= len(body) && bytes.Equal(body[m.Start:m.End], c.Body[m.Start:m.End]) {
			best = c
		}
	}
	if best == nil && len(cands) > 0 {
		best = cands[len(cands)-1]
	}
	return best
}

// keep records r under beginning k, in place of prev (the request it was
// read against, which it follows) when prev is there, else as a new one
// (the oldest of k going when k has maxPerBeginning); then keeps the
// views within maxBytes (heldBytes: a view is its body and more). p.mu is
// held; readers copy a list under it, so the lists change in place.
func (p *Reparser) keep(k uint64, prev, r *Request) {
	list := p.recent[k]
	i := -1
	if prev != nil {
		i = slices.Index(list, prev)
	}
	switch {
	case i >= 0:
		p.drop(prev)
		list = slices.Delete(list, i, i+1)
	case len(list) >= maxPerBeginning:
		p.drop(list[0])
		list = slices.Delete(list, 0, 1)
	}
	list = append(list, r)
	p.bytes += r.heldBytes()
	bigbuf.Retain(r.Body)
	if p.bytes > p.maxBytes { // not a map's walk begun a request for nothing
		for k2, old := range p.recent { // over the bound: any other goes (it is only a guess)
			if p.bytes <= p.maxBytes {
				break
			}
			if k2 == k {
				continue
			}
			for _, c := range old {
				p.drop(c)
			}
			delete(p.recent, k2)
		}
	}
	for len(list) > 1 && p.bytes > p.maxBytes { // still over: this beginning's oldest go
		p.drop(list[0])
		list = slices.Delete(list, 0, 1)
	}
	p.recent[k] = list
}

// drop takes r's share out of the bound and releases its body (p.mu is
// held; the caller takes r off its list).
func (p *Reparser) drop(r *Request) {
	p.bytes -= r.heldBytes()
	bigbuf.Release(r.Body)
}

// heldBytes is the memory a kept view holds, to bound the Reparser by:
// its body, the decoded strings of its messages (copies when the JSON
// held escapes), the message and field structs, and a fixed share for the
// request and its place in the map. A body of two million empty messages
// holds far more than its bytes. Computed once, before the view is kept.
func (r *Request) heldBytes() int {
	if r.held > 0 {
		return r.held
	}
	r.held = bodyBytes(r.Body) + r.viewBytes()
	return r.held
}

// bodyBytes is the memory a body holds: a large body's buffer is a bigbuf
// class, up to a quarter longer; one read without a declared length, its
// capacity.
func bodyBytes(body []byte) int { return max(cap(body), bigbuf.SizeOf(len(body))) }

// ViewBytes is the memory the view holds besides its body (heldBytes less
// the body), for a holder that bounds memory by the body's bytes (the
// capture's queue) and must count the view it keeps beside it. It changes
// nothing in r, so it is safe while other goroutines read the view.
func (r *Request) ViewBytes() int {
	if r.held > 0 { // set before the view was shared, when kept
		return r.held - bodyBytes(r.Body)
	}
	return r.viewBytes()
}

func (r *Request) viewBytes() int {
	return 512 + cap(r.fields)*int(unsafe.Sizeof(Field{})) + cap(r.Messages)*int(unsafe.Sizeof(Message{})) +
		r.spareCalls()*int(unsafe.Sizeof(ToolCall{})) + r.tallied().strBytes + cap(r.keys)*int(unsafe.Sizeof(xxh3.Uint128{}))
}

// parseKeyed is ParseRequest(body), reusing the messages of prev (nil:
// none) that body repeats at their place: those in the first bytes that
// keys (body's blocks' BodyKeys, nil: none) show the same as prev's are
// taken without a comparison, the others compared. Anything it does not
// read the simple way (a repeated or escaped top-level key, anything
// invalid) is left to ParseRequest, which also words the errors.
//
// The body must be valid UTF-8, as ParseRequest requires. The bytes of the
// repeated messages, and the separators between them, are not checked
// again: they are prev's body's bytes (checked when prev was parsed) and
// ASCII. Only the rest of the body is.
func parseKeyed(body []byte, keys []xxh3.Uint128, prev *Request) (r *Request, err error) {
	// The first messages whose strings may be body's bytes (the others
	// are memory of their own: taken from a view that owns its strings).
	fresh := 0
	defer func() {
		if err == nil {
			r.keys = keys
			r.share(fresh)
		}
	}()
	if prev == nil {
		return ParseRequest(body)
	}
	same := span{known: knownPrefix(keys, prev.keys)}
	r, ok := walkTop(body, prev, &same)
	if !ok || !utf8.Valid(body[:same.start]) || !utf8.Valid(body[same.end:]) {
		if r != nil {
			r.unclaim(prev)
		}
		return ParseRequest(body)
	}
	if prev.arr != nil {
		fresh = r.reused // moved or shared from prev, they are its strings
	}
	if same.exact > 0 && (same.start <= same.known || bytes.Equal(body[:same.start], prev.Body[:same.start])) {
		r.base, r.same = prev.id, same.exact
	}
	return r, nil
}

// span is a byte range of a body: the messages a body repeats of an
// earlier one. Their first ones up to exact (0: none) are at the very
// places they were, the separators between them the same bytes. The
// first known bytes of the two bodies are the same by their keys
// (BodyKeys): not compared.
type span struct{ start, end, exact, known int }

// walkTop reads the top-level object of body, validating each value as
// ValidJSON would (the messages prev repeats excepted: they were), and
// builds the view; ok is false when ParseRequest must say.
//
// same is set to the bytes of the messages taken from prev, the white
// space and commas between them included (empty when there are none).
func walkTop(body []byte, prev *Request, same *span) (_ *Request, done bool) {
	s := bodyString(body)
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, false
	}
	// Room for the previous request's fields and one more: a client
	// sends the same fields request after request.
	r := &Request{Body: body, fields: make([]Field, 0, max(len(prev.fields)+1, 4))}
	defer func() {
		if !done {
			r.unclaim(prev) // the messages were read, what follows them failed
		}
	}()
	var msgs gjson.Result
	var keys keySet
	found := false
	for i = skipSpace(body, i+1); i < len(body) && body[i] == '"'; {
		end, ok := endString(body, i+1)
		if !ok || bytes.IndexByte(body[i+1:end-1], '\\') >= 0 {
			return nil, false // an escaped key: gjson unescapes it
		}
		key := s[i+1 : end-1]
		if i = skipSpace(body, end); i >= len(body) || body[i] != ':' {
			return nil, false
		}
		v := skipSpace(body, i+1)
		var vend int
		var fk RawKey
		if key == "messages" && v < len(body) && body[v] == '[' {
			if vend, ok = r.walkMessages(body, v, prev, same); !ok {
				return nil, false
			}
			msgs = gjson.Result{Type: gjson.JSON, Raw: s[v:vend], Index: v}
			found = true
		} else if pf, ok := prev.repeats(len(r.fields), key, body, v, same.known); ok {
			vend, fk = v+(pf.End-pf.Start), pf.key // the previous request's value, checked and keyed then
		} else if vend, ok = validValue(body, v, MaxDepth-1); !ok {
			return nil, false
		} else {
			vend = trimSpaceEnd(body, v, vend)
			fk = fieldKey(key, s[v:vend])
		}
		if keys.add(key) {
			return nil, false // a repeated key (the view takes the last), or too many to check
		}
		r.fields = append(r.fields, Field{Key: key, Start: v, End: vend, key: fk})
		r.readTop(key, s[v:vend])
		switch i = skipSpace(body, vend); {
		case i < len(body) && body[i] == ',':
			i = skipSpace(body, i+1)
		case i < len(body) && body[i] == '}':
			if skipSpace(body, i+1) != len(body) || !found || !msgs.IsArray() {
				return nil, false
			}
			r.DuplicateKeys = r.msgDup
			return r, true
		default:
			return nil, false
		}
	}
	return nil, false
}

// repeats returns r's member named key when body, at v, holds its value
// byte for byte and then ends the member: a client sends its tools,
// settings and system fields unchanged request after request, and such a
// value is neither checked nor hashed again (its bytes are still checked
// for UTF-8 with the rest of the body). The member at index i is looked
// at first (the same layout), then the first of that name. Never
// "messages". A value at its very place within the first known bytes
// (the same by the bodies' keys) is not compared.
func (r *Request) repeats(i int, key string, body []byte, v, known int) (Field, bool) {
	if key == "messages" {
		return Field{}, false
	}
	var pf Field
	switch {
	case i < len(r.fields) && r.fields[i].Key == key:
		pf = r.fields[i]
	default:
		f, ok := r.Field(key)
		if !ok {
			return Field{}, false
		}
		pf = f
	}
	val := r.Body[pf.Start:pf.End]
	if len(val) == 0 || !(v == pf.Start && pf.End <= known || bytes.HasPrefix(body[v:], val)) {
		return Field{}, false
	}
	n := skipSpace(body, v+len(val))
	return pf, n < len(body) && (body[n] == ',' || body[n] == '}')
}

// readTop reads a top-level value the view keeps (model, stream).
func (r *Request) readTop(key, raw string) {
	switch key {
	case "model":
		if v := gjson.Parse(raw); v.Type == gjson.String {
			r.Model = v.Str
		}
	case "stream":
		r.Stream = gjson.Parse(raw).Type == gjson.True
	}
}

// trimSpaceEnd returns end less the white space validValue skipped.
func trimSpaceEnd(body []byte, start, end int) int {
	for end > start && (body[end-1] == ' ' || body[end-1] == '\n' || body[end-1] == '\r' || body[end-1] == '\t') {
		end--
	}
	return end
}

// walkMessages reads the messages array starting at body[v] ('['): each
// element that prev has at the same index with the same bytes is taken
// from prev, moved; the others are validated and parsed. It returns where
// the array ends.
//
// The view keeps its messages at about their count: a short history is
// gathered in a pooled scratch slice and copied out at its length; a long
// one goes into room for the previous request's count and a few more (a
// conversation's next request), fitted when that guess left much more
// room than it used (a short request read against a long one).
func (r *Request) walkMessages(body []byte, v int, prev *Request, same *span) (int, bool) {
	if prev.arr != nil {
		if n, keyed := sharedRun(body, skipSpace(body, v+1), prev, same.known); n > 0 {
			return r.walkShared(body, prev, same, n, keyed)
		}
	}
	var sp *[]Message
	if len(prev.Messages) < exactBelow {
		sp = scratchMessages.Get().(*[]Message)
		r.Messages = (*sp)[:0]
	} else {
		r.Messages = messageRoom(len(prev.Messages) + 4)
	}
	end, ok := r.walkElements(body, v, prev, same)
	switch {
	case !ok:
	case sp != nil && unsafe.SliceData(r.Messages) == unsafe.SliceData(*sp):
		r.Messages = append(make([]Message, 0, len(r.Messages)), r.Messages...)
	default:
		r.Messages = fitted(r.Messages)
		clear(r.Messages[len(r.Messages):cap(r.Messages)]) // a recycled array's room holds an earlier view's messages
	}
	if sp != nil {
		putScratch(sp)
	}
	return end, ok
}

// fitted returns ms, or a copy at its length when it has much more room
// than it uses (more than an eighth and four): a view keeps its messages,
// and a Reparser counts their room against its bound.
func fitted(ms []Message) []Message {
	if cap(ms)-len(ms) > len(ms)/8+4 {
		return append(make([]Message, 0, len(ms)), ms...)
	}
	return ms
}

// exactBelow is the previous request's count of messages under which a
// view's messages are gathered in a scratch slice.
const exactBelow = 32

var scratchMessages = sync.Pool{New: func() any { s := make([]Message, 0, exactBelow); return &s }}

// putScratch clears a scratch slice (it held strings of a body) and puts
// it back.
func putScratch(sp *[]Message) {
	clear((*sp)[:cap(*sp)])
	scratchMessages.Put(sp)
}

// walkElements is walkMessages' walk, appending to r.Messages.
func (r *Request) walkElements(body []byte, v int, prev *Request, same *span) (int, bool) {
	r.tally = newTally()
	i := skipSpace(body, v+1)
	if i < len(body) && body[i] == ']' {
		return i + 1, true
	}
	return r.walkFrom(body, i, 0, prev, same, true)
}

// walkFrom walks the messages array from message idx, which starts at
// body[i], appending to r.Messages (which holds the idx before it, folded
// into r.tally); with reuse, taking what it can of prev's messages.
func (r *Request) walkFrom(body []byte, i, idx int, prev *Request, same *span, reuse bool) (int, bool) {
	s := bodyString(body)
	var movedCalls []ToolCall // the moved messages' tool calls, in one array
	for ; i < len(body); idx++ {
		// The message is written in place, at the end of the array: a
		// long history's are moved, not copied three times each.
		var m *Message
		end := -1
		next := -1 // where the next message starts, when its bytes are known prev's
		if reuse && idx < len(prev.Messages) {
			pm := &prev.Messages[idx]
			raw := prev.Body[pm.Start:pm.End]
			known := i == pm.Start && pm.End <= same.known // its bytes and those before it are prev's, by their keys
			if known && idx+1 < len(prev.Messages) && prev.Messages[idx+1].End <= same.known {
				// So are the separator after it and the next message:
				// the body is not read (cold by now) at either.
				next = prev.Messages[idx+1].Start
			}
			if e := i + len(raw); (known || bytes.HasPrefix(body[i:], raw)) && e < len(body) {
				if next >= 0 || separatorAt(body, e) {
					if movedCalls == nil && len(pm.ToolCalls) > 0 {
						movedCalls = make([]ToolCall, 0, prev.toolCalls())
					}
					r.Messages = append(r.Messages, *pm)
					m = &r.Messages[len(r.Messages)-1]
					moved(m, prev, s, i, &movedCalls)
					r.reused++
					end = e
					if known {
						r.keyed++
					}
					if i == pm.Start && (idx == 0 || same.exact == prev.Messages[idx-1].End && (known || bytes.Equal(body[same.exact:i], prev.Body[same.exact:i]))) {
						same.exact = e
					}
					if idx == 0 {
						same.start = i
					}
					same.end = e
				}
			}
			reuse = end >= 0 // the first message that differs ends the reuse
		}
		if end < 0 {
			r.Messages = append(r.Messages, Message{})
			m = &r.Messages[len(r.Messages)-1]
			e, ok := validValue(body, i, MaxDepth-2)
			if !ok {
				return 0, false
			}
			end = trimSpaceEnd(body, i, e)
			el := gjson.Parse(s[i:end])
			el.Index = i
			*m = parseMessage(idx, el, new(bool))
		}
		r.msgDup = r.msgDup || m.dup
		r.tally.add(r.Messages, idx) // while m is in the cache
		if len(r.Messages) > MaxMessages || r.tally.calls > MaxToolCalls {
			return 0, false // ParseRequest says why
		}
		if next >= 0 && end >= 0 {
			i = next
			continue
		}
		switch i = skipSpace(body, end); {
		case i < len(body) && body[i] == ',':
			i = skipSpace(body, i+1)
		case i < len(body) && body[i] == ']':
			r.callArray = movedCalls
			clear(movedCalls[len(movedCalls):cap(movedCalls)]) // a recycled array's room holds an earlier view's calls
			return i + 1, true
		default:
			return 0, false
		}
	}
	return 0, false
}

// separatorAt reports whether an array's element that ends at e is
// followed by a comma or the array's end.
func separatorAt(body []byte, e int) bool {
	n := skipSpace(body, e)
	return n < len(body) && (body[n] == ',' || body[n] == ']')
}

// moved makes m, a copy of one of prev's messages, that message placed at
// offset at of the new body s: its byte ranges moved, and its strings that
// were prev's body's bytes taken from the new body instead (the same
// bytes), so that the new view holds no reference to the old body.
//
// Its tool calls are copied to the end of *calls (room for the whole
// view's, made once): one allocation for a history's calls, not one for
// each message that has some.
func moved(m *Message, prev *Request, s string, at int, calls *[]ToolCall) {
	d := at - m.Start
	m.shift(d)
	old := bodyString(prev.Body)
	re := func(x string) string { return rebase(x, old, s, d) }
	m.Role, m.Name, m.Reasoning, m.Content, m.ToolCallID = re(m.Role), re(m.Name), re(m.Reasoning), re(m.Content), re(m.ToolCallID)
	if len(m.ToolCalls) > 0 {
		k := len(*calls)
		*calls = append(*calls, m.ToolCalls...)
		m.ToolCalls = (*calls)[k:len(*calls):len(*calls)] // capped: an append to them copies
		for k := range m.ToolCalls {
			tc := &m.ToolCalls[k]
			tc.ID, tc.Type, tc.Name, tc.Arguments = re(tc.ID), re(tc.Type), re(tc.Name), re(tc.Arguments)
		}
	}
}

// spareCalls is the room in r's moved calls' array past them.
func (r *Request) spareCalls() int { return cap(r.callArray) - len(r.callArray) }

// toolCalls counts r's messages' tool calls (its tally's).
func (r *Request) toolCalls() int { return r.tallied().calls }

// rebase returns x, a string of the view of old, as the same bytes of
// new, d bytes further; a string that is not old's memory (decoded, or
// joined) is returned as it is.
func rebase(x, old, new string, d int) string {
	if len(x) == 0 || len(old) == 0 {
		return x
	}
	p, o := uintptr(unsafe.Pointer(unsafe.StringData(x))), uintptr(unsafe.Pointer(unsafe.StringData(old)))
	if p < o || p+uintptr(len(x)) > o+uintptr(len(old)) {
		return x
	}
	off := int(p-o) + d
	if off < 0 || off+len(x) > len(new) {
		panic(fmt.Sprintf("conv: rebase out of range (%d+%d of %d)", off, len(x), len(new)))
	}
	return new[off : off+len(x)]
}
