package reqshape

import (
	"container/list"
	"strings"
	"sync"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
	"github.com/shaperproxy/shaperproxy/shaping"
)

// memo remembers shaped texts so that the history an agent re-sends with
// every request is shaped once, not once per request. It is keyed by where
// the text was read (source: the key of the message's bytes, which the
// view computed once when the message was first parsed, and which part of
// it) and the options, so that a hit costs no pass over the text; it holds
// at most a fixed number of entries (least recently used out first). A
// memo never changes a result: Shape gives exactly what shaping.Shape
// gives (the same message bytes hold the same text). The zero value is
// not usable; use newMemo. A memo is safe for concurrent use.
type memo struct {
	mu    sync.Mutex
	max   int
	order *list.List // front = most recent; values are *memoEntry
	items map[memoKey]*list.Element
	hits  uint64
	miss  uint64
	// prints remembers the messages' print parts by the key of their
	// bytes too, for the cache-aware policy's fingerprints (in two
	// generations, not in recency order: see printMemo).
	prints *printMemo
	// last is the entry last set at each block's place (at: two a
	// message), whichever request set it, tried before the map: a
	// conversation's next request has its history's blocks at the same
	// places. An entry is right for its key even once it left the map
	// (then MoveToFront moves nothing). An entry found there is made the
	// most recent all the same, or a history in use would age out of the
	// map.
	last resolved.Places[memoKey, *list.Element]
}

// placeOf is where a block of message i lies among a request's blocks
// (memo.begin, memo.shape's at).
func placeOf(i int, part uint8) int { return 2*i + int(part) - 1 }

// begin starts a request of n messages: its blocks' places (placeOf).
func (m *memo) begin(n int) {
	if m == nil {
		return
	}
	m.mu.Lock()
	m.last.Begin(2 * n)
	m.mu.Unlock()
}

// source says where a text was read: the message (the key of its bytes,
// conv.Message.RawKey) and the part of it.
type source struct {
	msg  conv.RawKey
	part uint8 // partReasoning or partThink
}

const (
	partReasoning uint8 = iota + 1 // the message's reasoning field
	partThink                      // the <think> block of its content
)

type memoKey struct {
	src  source // fixes the text: no need to hash or compare it
	opts optsKey
}

// optsKey is shaping.Options as a key of fixed size: hashed without
// reading a string, once per block of every request.
type optsKey struct {
	op       uint8
	marker   bool
	maxChars int
}

// keyOfOpts returns o's optsKey; false for an operation it does not know
// (the memo then shapes without remembering).
func keyOfOpts(o shaping.Options) (optsKey, bool) {
	k := optsKey{marker: o.Marker, maxChars: o.MaxChars}
	switch o.Op {
	case "":
	case shaping.OpExtract:
		k.op = 1
	case shaping.OpKeep:
		k.op = 2
	case shaping.OpDrop:
		k.op = 3
	default:
		return k, false
	}
	return k, true
}

type memoEntry struct {
	key     memoKey
	out     string
	quoted  conv.String // conv.QuoteString(out), made on the first ask (quotedOK)
	quoteOK bool
	changed bool
}

// newMemo returns a Memo holding up to max entries.
func newMemo(max int) *memo {
	return &memo{max: max, order: list.New(), items: map[memoKey]*list.Element{}, prints: newPrintMemo(4 * max)}
}

// Shape returns shaping.Shape(text, o), from memory when it can; text is
// what src holds, at place at of the request begun last (placeOf; -1:
// none).
func (m *memo) Shape(src source, at int, text string, o shaping.Options) (string, bool) {
	out, _, changed, _ := m.shapeEntry(src, at, text, o, false)
	return out, changed
}

// ShapeQuoted is Shape that also returns, when changed, out as a JSON
// string (conv.QuoteString(out)), remembered with out: the history an
// agent re-sends is quoted once, not once per request, and its edits
// carry their text (conv.String.Replace). The token is shared: callers
// must not modify it.
func (m *memo) ShapeQuoted(src source, at int, text string, o shaping.Options) (out string, quoted conv.String, changed bool) {
	out, quoted, changed, _ = m.shapeEntry(src, at, text, o, true)
	return out, quoted, changed
}

// shapeEntry is Shape (quote false) or ShapeQuoted (quote true) that also
// returns the memo's entry of the text (nil when it keeps none): what a
// carry keeps of a block. An entry returned
// by a quoting call has its token made, and does not change after.
func (m *memo) shapeEntry(src source, at int, text string, o shaping.Options, quote bool) (string, conv.String, bool, *memoEntry) {
	if o.Op == shaping.OpKeep {
		return text, conv.String{}, false, nil // what shaping.Shape gives, without looking text up
	}
	ok, known := keyOfOpts(o)
	if m == nil || !known {
		out, changed := shaping.Shape(text, o)
		return out, quoteIf(quote && changed, out), changed, nil
	}
	k := memoKey{src: src, opts: ok}
	m.mu.Lock()
	el, found := m.last.Get(at, k)
	if !found {
		el, found = m.items[k]
	}
	var e *memoEntry
	if found {
		m.order.MoveToFront(el) // not in the list (it left the map): nothing moves
		e = el.Value.(*memoEntry)
		m.last.Set(at, k, el)
		m.hits++
		if quote && e.changed && !e.quoteOK {
			e.quoted, e.quoteOK = conv.QuoteString(e.out), true
		}
		q := e.quoted
		m.mu.Unlock()
		if !quote || !e.changed {
			q = conv.String{}
		}
		if !e.changed {
			return text, q, false, e
		}
		return e.out, q, e.changed, e
	}
	m.miss++
	m.mu.Unlock()
	out, changed := shaping.Shape(text, o)
	// The memo outlives the request: its strings must not share the
	// memory of the request's body (a view's strings do), or each entry
	// would keep a whole history alive. An unchanged text is not kept.
	e = &memoEntry{key: k, changed: changed}
	if changed {
		e.out = strings.Clone(out)
	}
	if quote && changed {
		e.quoted, e.quoteOK = conv.QuoteString(e.out), true
	}
	m.put(e, at)
	return out, e.quoted, changed, e
}

func quoteIf(ok bool, s string) conv.String {
	if !ok {
		return conv.String{}
	}
	return conv.QuoteString(s)
}

func (m *memo) put(e *memoEntry, at int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[e.key]; ok {
		el.Value = e
		m.order.MoveToFront(el)
		m.last.Set(at, e.key, el) // a right pair, whichever request began the places since
		return
	}
	el := m.order.PushFront(e)
	m.items[e.key] = el
	m.last.Set(at, e.key, el)
	for m.order.Len() > m.max {
		old := m.order.Back()
		m.order.Remove(old)
		delete(m.items, old.Value.(*memoEntry).key)
	}
}

// Stats returns the hits and misses so far.
func (m *memo) Stats() (hits, misses uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.hits, m.miss
}
