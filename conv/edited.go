package conv

import (
	"bytes"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/internal/slicepool"
	"github.com/zeebo/xxh3"
)

// editedBodies keeps the bodies Apply edited from a Reparser's views, so
// that the next request of a conversation is edited over one of them
// instead of into a fresh buffer.
//
// A conversation's request repeats the previous one's history byte for
// byte, and a transform that edits the history (the shaper) edits it the
// same way again: the edited body of the previous request already holds
// the new one's up to where the history stopped repeating. Writing the
// new body over it copies only what follows — the new messages — where a
// fresh buffer takes the whole megabyte again (the largest single cost of
// shaping a long history).
//
// It is exact, not a guess: the Reparser records how many first bytes of
// a body are its base's (a request it compared byte for byte), so two
// requests share their first bytes as far as each shares them with a
// common base (its base, or its base's, …: its chain); the table keeps
// each edited body's edits, and a kept body is written over only up to
// where the two requests' bytes and their edits (ranges and the very
// bytes put in) agree.
//
// A body comes to the table when no one else holds it (bigbuf.Reclaim:
// the call that sent it, the capture that recorded it, all let it go),
// and leaves it to be written over, or for bigbuf's free list: the
// oldest first when the bodies it holds pass its bound, those of a
// conversation's earlier requests once a later one took its body, and
// any that waited keptIdle. Safe for concurrent use.
type editedBodies struct {
	mu      sync.Mutex
	max     int // bounds bytes
	bytes   int // of the bodies back (free)
	byID    map[uint64]*keptBody
	order   []uint64    // the ids of byID, oldest first (some since forgotten)
	free    []*keptBody // the bodies back, oldest first
	taken   uint64      // the view whose body was taken last, and how many
	tookLim int         // first bytes it shared with the request (tests)

	idle  time.Duration // how long a body back waits to be taken (keptIdle)
	timer *time.Timer   // lets the bodies go that waited idle; armed while some are back
	armed bool

	over  atomic.Int64 // bodies written over a kept one
	fresh atomic.Int64 // bodies of writeOver's size that found none to write over
	// kept and written are the bytes of those bodies found in place and
	// written (all of a fresh one's).
	kept, written atomic.Int64
}

// keptBody is what the table knows of the body Apply edited from the
// view with id: its chain, its length and edits, and the body itself
// (out, the table's reference) once it is back and until it is taken.
// One taken, or let go, leaves its link: id and chain.
type keptBody struct {
	id    uint64
	chain []link         // the view's bases, nearest first
	keys  []xxh3.Uint128 // the view's body's keys (BodyKeys; nil: none), once it has a body: a link holds none
	n     int
	size  int       // the memory it holds once back: its buffer and edits
	back  time.Time // when it came back
	out   []byte
	edits []keptEdit     // nil in a link
	links [maxChain]link // chain's array
	// msgs is the message array of the view of out (Apply's), for the
	// view of the body written over it: the messages the two bodies have
	// the same, at the same places, are not derived again (derive). grow
	// is what its edits added to the memory its strings hold (the view's
	// tally less its request's).
	msgs []Message
	grow int
	// body is the number of out (Request.Lineage of its view; 0: none),
	// for the view of the body written over it.
	body uint64
}

// link is a base of a view: its id, and how many first bytes of the two
// bodies are the same.
type link struct {
	id  uint64
	lim int
}

// keptEdit is an edit of a kept body: the range it replaced in the
// view's body and the length of what it put there, and the String's
// token it put there when it came from one (Edit.token; nil otherwise:
// a pooled array's room may keep a token alive until it is reused, a
// memo's text the shaper's carries hold anyway).
type keptEdit struct {
	start, end, n int
	token         *byte
}

// keptEditOf returns the kept record of e.
func keptEditOf(e *Edit) keptEdit {
	k := keptEdit{start: e.Start, end: e.End, n: len(e.Repl)}
	if e.token {
		k.token = unsafe.SliceData(e.Repl)
	}
	return k
}

// sameRepl reports whether e puts at its place what o put there, old
// holding it at at: the same String's token (its bytes unchanged, no
// look at them), else the same bytes.
func sameRepl(e *Edit, o *keptEdit, old []byte, at int) bool {
	if len(e.Repl) != o.n {
		return false
	}
	if e.token && o.token != nil && o.token == unsafe.SliceData(e.Repl) {
		return true
	}
	return bytes.Equal(e.Repl, old[at:at+o.n])
}

// maxChain is how many bases a view's chain holds: the request it
// repeats, that one's, and so on (a conversation sends its next request
// while the last one's body is still being sent or recorded).
const maxChain = 16

// maxScan is how many of the latest bodies back take looks at.
const maxScan = 64

// spareBases is how many bodies of a request's bases the table keeps
// once the request took one: a conversation's requests sent at once.
const spareBases = 4

// maxKept bounds the views the table knows of (bodies and links).
const maxKept = 4096

// keptIdle is how long a body back waits for the next request of its
// conversation before it goes to the free list (which lets what waits
// there go within minutes): an agent's next request comes seconds after
// the answer, a person's within minutes.
const keptIdle = 2 * time.Minute

var keptEdits slicepool.Pool[keptEdit]

func newEditedBodies(max int) *editedBodies {
	return &editedBodies{max: max, byID: make(map[uint64]*keptBody), idle: keptIdle}
}

// detach takes k's body (when back: the caller took k off t.free) and
// edits out of the table, leaving k a link (t.mu held).
func (t *editedBodies) detach(k *keptBody) ([]byte, []keptEdit) {
	out, edits := k.out, k.edits
	t.bytes -= k.size
	k.out, k.edits, k.keys, k.size, k.msgs = nil, nil, nil, 0, nil
	return out, edits
}

// letGo detaches k's body and returns it, for the caller to release once
// t.mu is unlocked (t.mu held).
func (t *editedBodies) letGo(k *keptBody) []byte {
	out, edits := t.detach(k)
	keptEdits.Put(edits)
	return out
}

// release releases the bodies let go (t.mu not held).
func release(bs [][]byte) {
	for _, b := range bs {
		bigbuf.Release(b)
	}
}

// expire lets the bodies go that waited idle, and arms the timer for the
// next one (the timer's goroutine).
func (t *editedBodies) expire() {
	var drop [][]byte
	defer func() { release(drop) }() // after the unlock below
	t.mu.Lock()
	defer t.mu.Unlock()
	t.armed = false
	cut := time.Now().Add(-t.idle)
	for len(t.free) > 0 && !t.free[0].back.After(cut) {
		drop = append(drop, t.letGo(t.free[0]))
		t.free = slices.Delete(t.free, 0, 1)
	}
	if len(t.free) > 0 {
		t.armed = true
		t.timer.Reset(time.Until(t.free[0].back.Add(t.idle)))
	}
}

// fits reports whether the buffer of the body back k holds n bytes and
// is not much larger: a short body does not keep a long one's buffer.
func (k *keptBody) fits(n int) bool { return n <= cap(k.out) && cap(k.out) <= 2*n }

// editedLen is len(ApplyEdits(body, edits)).
func editedLen(body []byte, edits []Edit) int {
	n := len(body)
	for _, e := range edits {
		n += len(e.Repl) - (e.End - e.Start)
	}
	return n
}

// writeOver returns r.Body with edits (sorted, not overlapping) applied,
// written over a kept body that holds it — one that shares r's first
// bytes when there is one: its bytes are kept up to where the two agree,
// the rest written. ok is false when none holds it (the caller edits into
// a buffer of bigbuf's free list).
//
// head is the message array of the view of the body written over, its
// first len(head) messages those of out's view: r's messages that lie
// before where the two agree, edited alike, at the same places in out,
// whose view made from r would be the same (derive takes them).
func (t *editedBodies) writeOver(r *Request, edits []Edit) (out []byte, head derivedHead, ok bool) {
	n := editedLen(r.Body, edits)
	if n < bigbuf.MinSize {
		return nil, head, false
	}
	old, oldEdits, kept, lim := t.take(r, n)
	if old == nil {
		t.fresh.Add(1)
		t.written.Add(int64(n))
		return nil, head, false
	}
	out, _ = bigbuf.Resized(old, n) // take checked that it holds n
	q, w, j := agreed(old, oldEdits, r.Body, lim, edits)
	if kept.msgs != nil {
		m := sort.Search(len(r.Messages), func(i int) bool { return r.Messages[i].End > q })
		head = kept
		head.msgs = kept.msgs[:min(m, len(kept.msgs))]
		head.whole = len(head.msgs) == len(kept.msgs)
	}
	if kept.over != 0 && w > 0 {
		head.over, head.same = kept.over, w // out's first w bytes stay those of body kept.over
	}
	t.kept.Add(int64(w))
	t.written.Add(int64(n - w))
	keptEdits.Put(oldEdits)
	at := q
	for _, e := range edits[j:] {
		w += copy(out[w:], r.Body[at:e.Start])
		w += copy(out[w:], e.Repl)
		at = e.End
	}
	copy(out[w:], r.Body[at:])
	t.over.Add(1)
	return out, head, true
}

// derivedHead is what a kept body holds of its view (take) and what
// writeOver gives derive of it: msgs, its messages that the view of the
// new body has the same (their array, with its room), and what its edits
// added to its strings' memory (grow), which holds for the head when it
// is all of that view's messages (whole).
type derivedHead struct {
	msgs  []Message
	grow  int
	whole bool
	// over is the number of the body written over (Request.Lineage),
	// and same how many of its first bytes the new body kept (0: none).
	over uint64
	same int
}

// take finds, among the latest bodies back, the one whose view shares
// the most first bytes with r and whose buffer holds n bytes — one of
// r's chain, or a view whose chain meets r's (a sibling: requests of one
// conversation sent at once are read against the same one) — else the
// oldest that holds n bytes, and takes it with its edits: the table's
// reference becomes the caller's. It returns how many first bytes of r
// are that body's view's (0: none).
func (t *editedBodies) take(r *Request, n int) (out []byte, edits []keptEdit, view derivedHead, lim int) {
	var buf [maxChain]link
	var drop [][]byte
	defer func() { release(drop) }()
	t.mu.Lock()
	defer t.mu.Unlock()
	chain := t.chainOf(buf[:0], r)
	onChains := 0 // the most bytes a body shares with r by their chains (shared: each chain's limits are within r.same)
	if len(chain) > 0 {
		onChains = r.same
	}
	best := -1
	for i := len(t.free) - 1; i >= 0 && i >= len(t.free)-maxScan; i-- {
		k := t.free[i]
		if !k.fits(n) {
			continue // its bytes need not be compared
		}
		// A body that cannot share more than the best so far, nor as
		// much in a smaller buffer, is not compared: the siblings of a
		// conversation's requests sent at once (a long history each)
		// would each compare every key of the body.
		if most := max(onChains, min(len(r.keys), len(k.keys))*keyBlock); most < lim ||
			most == lim && (best < 0 || cap(k.out) >= cap(t.free[best].out)) {
			continue
		}
		// The bytes the two views share by their bases, or by their
		// bodies' keys: requests sent at once by one conversation (or
		// by several with one history) are each other's siblings, and
		// their chains need not meet within maxChain.
		l := max(shared(chain, k), knownPrefix(r.keys, k.keys))
		if l > lim || l == lim && best >= 0 && l > 0 && cap(k.out) < cap(t.free[best].out) {
			best, lim = i, l
		}
	}
	for i := 0; best < 0 && i < len(t.free) && i < maxScan; i++ {
		// None shares r's bytes: the smallest that holds n is a buffer
		// all the same, all of it written (as one from the free list).
		if k := t.free[i]; k.fits(n) && (best < 0 || cap(k.out) < cap(t.free[best].out)) {
			best = i
		}
	}
	if best < 0 {
		return nil, nil, view, 0
	}
	k := t.free[best]
	t.taken, t.tookLim = k.id, lim
	t.free = slices.Delete(t.free, best, best+1)
	view = derivedHead{msgs: k.msgs, grow: k.grow, over: k.body}
	out, edits = t.detach(k) // its link stays, for the chains of the views that repeat it
	// The bodies of r's bases but the latest spareBases go back to the
	// free list, for any large body: r's conversation goes on from r
	// (those few serve its requests sent at once, which share them).
	onChain := func(o *keptBody) bool { return slices.ContainsFunc(chain, func(c link) bool { return c.id == o.id }) }
	if extra := countFunc(t.free, onChain) - spareBases; extra > 0 {
		t.free = slices.DeleteFunc(t.free, func(o *keptBody) bool { // oldest first
			if extra == 0 || !onChain(o) {
				return false
			}
			extra--
			drop = append(drop, t.letGo(o))
			return true
		})
	}
	return out, edits, view, lim
}

// chainOf appends r's chain to dst (room for maxChain): its base, and
// that one's chain as the table has it, each as far as r's first bytes
// are its base's (t.mu held).
func (t *editedBodies) chainOf(dst []link, r *Request) []link {
	if r.base == 0 || r.same == 0 {
		return dst
	}
	dst = append(dst, link{r.base, r.same})
	if b := t.byID[r.base]; b != nil {
		for _, l := range b.chain {
			if len(dst) == maxChain {
				break
			}
			dst = append(dst, link{l.id, min(l.lim, r.same)})
		}
	}
	return dst
}

// shared returns how many first bytes the view whose chain is chain
// shares with k's view: as many as with k's when k is on its chain, else
// as with the nearest base the two chains share (0: none).
//
// A base is parsed before the views read against it, so the ids of a
// chain, nearest first, go down: the nearest base the two share is found
// in one walk down both (take asks it of up to maxScan bodies a request).
func shared(chain []link, k *keptBody) int {
	for _, l := range chain {
		if l.id == k.id {
			return l.lim
		}
	}
	for i, j := 0, 0; i < len(chain) && j < len(k.chain); {
		switch l, m := chain[i], k.chain[j]; {
		case l.id == m.id:
			return min(l.lim, m.lim)
		case l.id > m.id:
			i++
		default:
			j++
		}
	}
	return 0
}

// agreed returns where the new body (body with edits) stops being old,
// an edited body (with oldEdits), as far as the first lim bytes of body
// are old's view's: q in body, w in the edited body, and j the first of
// edits at or after q. Before q every edit of the two is the same range
// replaced by the same bytes (compared with what old holds).
func agreed(old []byte, oldEdits []keptEdit, body []byte, lim int, edits []Edit) (q, w, j int) {
	lim = min(lim, len(body))
	d, i := 0, 0 // d: how much longer the edited body is so far
	for {
		nextNew := j < len(edits) && edits[j].Start < lim
		nextOld := i < len(oldEdits) && oldEdits[i].start < lim
		if !nextNew && !nextOld {
			return lim, lim + d, j
		}
		if nextNew && nextOld {
			e, o := &edits[j], &oldEdits[i]
			if e.Start == o.start && e.End == o.end && e.End <= lim && sameRepl(e, o, old, e.Start+d) {
				d += o.n - (o.end - o.start)
				i, j = i+1, j+1
				continue
			}
		}
		q = lim
		if nextNew {
			q = min(q, edits[j].Start)
		}
		if nextOld {
			q = min(q, oldEdits[i].start)
		}
		return q, q + d, j
	}
}

// link records r's chain once its parse settles (ParseKeyedLater: beside
// its request's trip upstream): the requests read against r while it is
// being sent (a conversation's requests sent at once) find their chain
// through it. An Apply of r that came first (keep) made the link already.
// Only for a body a buffer of its own could be edited from.
func (t *editedBodies) link(r *Request) {
	if len(r.Body) < bigbuf.MinSize || r.id == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[r.id] != nil {
		return // linked by an Apply that came first (keep): a link made later must not forget its body
	}
	k := &keptBody{id: r.id}
	k.chain = t.chainOf(k.links[:0], r)
	t.add(k)
}

// add records k (t.mu held): in place of what the table knew of its view
// (its link, or its earlier body: the view edited again), and within
// maxKept views, the oldest forgotten first.
func (t *editedBodies) add(k *keptBody) {
	if old := t.byID[k.id]; old != nil {
		t.forget(old)
	} else {
		t.order = append(t.order, k.id)
	}
	t.byID[k.id] = k
	for len(t.byID) > maxKept && len(t.order) > 0 {
		if old := t.byID[t.order[0]]; old != nil {
			t.forget(old)
		}
		t.order = t.order[1:]
	}
	if len(t.order) > 2*len(t.byID)+16 { // ids forgotten since
		t.order = slices.DeleteFunc(t.order, func(id uint64) bool { return t.byID[id] == nil })
	}
}

// keep records out, r.Body with edits applied (a bigbuf buffer), and v,
// its view, for the requests that repeat r: it comes to the table when
// every holder let it go, and v's message array with it (v is not
// recycled: Request.Recycle).
func (t *editedBodies) keep(r *Request, out []byte, edits []Edit, v *Request) {
	if r.id == 0 || cap(out) < bigbuf.MinSize || bigbuf.SizeOf(len(out)) > t.max/4 {
		return
	}
	if v.owned { // its strings are no body's: nothing that goes back, nor out (bigbuf may hand it back in another buffer)
		v.derived = false // its array goes on with the body
	}
	kept := keptEdits.Get(len(edits), 4*len(edits)+16)[:0]
	for _, e := range edits {
		kept = append(kept, keptEditOf(&e))
	}
	t.mu.Lock()
	k := t.byID[r.id] // the link made at the parse
	if k == nil || k.out != nil || k.edits != nil {
		// None (forgotten, or not linked), or a body of the view
		// edited again: the later one is kept.
		k = &keptBody{id: r.id}
		k.chain = t.chainOf(k.links[:0], r)
		t.add(k)
	}
	k.n, k.edits, k.keys, k.body = len(out), kept, r.keys, v.lin.body
	if v.owned {
		k.msgs, k.grow = v.Messages, v.tally.strBytes-r.tallied().strBytes
	}
	t.mu.Unlock()
	// Reaches k, not out: k holds no byte of it until it is back.
	if !bigbuf.Reclaim(out, func(b []byte) { t.back(k, b) }) {
		t.mu.Lock()
		t.letGo(k) // not a buffer bigbuf counts: it never comes back
		t.mu.Unlock()
	}
}

// back takes k's body, b, when its last holder let it go, unless k was
// forgotten meanwhile; then keeps the bodies back within the bound, the
// oldest going first.
func (t *editedBodies) back(k *keptBody, b []byte) {
	var drop [][]byte
	t.mu.Lock()
	if t.byID[k.id] != k || k.edits == nil {
		drop = append(drop, b)
	} else {
		k.out = b[:k.n] // its capacity the buffer's: what it holds, and may hold
		k.size = len(b) + cap(k.edits)*24 + cap(k.keys)*16 + cap(k.msgs)*int(unsafe.Sizeof(Message{}))
		k.back = time.Now()
		t.free = append(t.free, k)
		t.bytes += k.size
		for t.bytes > t.max && len(t.free) > 0 {
			drop = append(drop, t.letGo(t.free[0]))
			t.free = slices.Delete(t.free, 0, 1)
		}
		if !t.armed && len(t.free) > 0 {
			t.armed = true
			if t.timer == nil {
				t.timer = time.AfterFunc(t.idle, t.expire)
			} else {
				t.timer.Reset(t.idle)
			}
		}
	}
	t.mu.Unlock()
	release(drop)
}

// forget drops what the table knows of k: its body, when back, goes to
// the free list; one not back yet goes there when it comes (t.mu held).
func (t *editedBodies) forget(k *keptBody) {
	delete(t.byID, k.id)
	if k.out != nil {
		t.free = slices.DeleteFunc(t.free, func(o *keptBody) bool { return o == k })
		bigbuf.Release(t.letGo(k)) // its reclaimer was spent bringing it back: nothing runs under t.mu
		return
	}
	t.letGo(k) // not back yet: back finds it forgotten
}

// countFunc counts the elements of s for which f holds.
func countFunc[T any](s []T, f func(T) bool) int {
	n := 0
	for _, x := range s {
		if f(x) {
			n++
		}
	}
	return n
}
