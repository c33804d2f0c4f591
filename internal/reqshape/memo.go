package reqshape

import (
	"container/list"
	"hash/maphash"
	"strings"
	"sync"

	"github.com/shaperproxy/shaperproxy/internal/jsonstr"
	"github.com/shaperproxy/shaperproxy/shaping"
)

// memo remembers shaped texts so that the history an agent re-sends with
// every request is shaped once, not once per request. It is keyed by the
// text and the options, and holds at most a fixed number of entries (least
// recently used out first). A memo never changes a result: Shape gives
// exactly what shaping.Shape gives. The zero value is not usable; use
// NewMemo. A memo is safe for concurrent use.
type memo struct {
	mu    sync.Mutex
	seed  maphash.Seed
	max   int
	order *list.List // front = most recent; values are *memoEntry
	items map[memoKey]*list.Element
	hits  uint64
	miss  uint64
}

type memoKey struct {
	h    uint64
	n    int // length of the text, to make a hash collision harmless in practice
	opts shaping.Options
}

type memoEntry struct {
	key     memoKey
	text    string
	out     string
	quoted  []byte // jsonstr.Quote(out), made on the first ask (nil: not yet)
	changed bool
}

// newMemo returns a Memo holding up to max entries.
func newMemo(max int) *memo {
	return &memo{seed: maphash.MakeSeed(), max: max, order: list.New(), items: map[memoKey]*list.Element{}}
}

// Shape returns shaping.Shape(text, o), from memory when it can.
func (m *memo) Shape(text string, o shaping.Options) (string, bool) {
	out, _, changed := m.shape(text, o, false)
	return out, changed
}

// ShapeQuoted is Shape that also returns, when changed, out as a JSON
// string token (jsonstr.Quote(out)), remembered with out: the history an
// agent re-sends is quoted once, not once per request. The quoted slice is
// shared: callers must not modify it.
func (m *memo) ShapeQuoted(text string, o shaping.Options) (out string, quoted []byte, changed bool) {
	return m.shape(text, o, true)
}

func (m *memo) shape(text string, o shaping.Options, quote bool) (string, []byte, bool) {
	if o.Op == shaping.OpKeep {
		return text, nil, false // what shaping.Shape gives, without hashing text
	}
	if m == nil {
		out, changed := shaping.Shape(text, o)
		return out, quoteIf(quote && changed, out), changed
	}
	k := memoKey{h: maphash.String(m.seed, text), n: len(text), opts: o}
	m.mu.Lock()
	if el, ok := m.items[k]; ok && el.Value.(*memoEntry).text == text {
		m.order.MoveToFront(el)
		e := el.Value.(*memoEntry)
		m.hits++
		if quote && e.changed && e.quoted == nil {
			e.quoted = jsonstr.Quote(e.out)
		}
		q := e.quoted
		m.mu.Unlock()
		if !quote || !e.changed {
			q = nil
		}
		return e.out, q, e.changed
	}
	m.miss++
	m.mu.Unlock()
	out, changed := shaping.Shape(text, o)
	// The memo outlives the request: its strings must not share the
	// memory of the request's body (a view's strings do), or each entry
	// would keep a whole history alive.
	e := &memoEntry{key: k, text: strings.Clone(text), changed: changed}
	if e.out = e.text; out != text {
		e.out = strings.Clone(out)
	}
	if quote && changed {
		e.quoted = jsonstr.Quote(e.out)
	}
	m.put(e)
	return out, e.quoted, changed
}

func quoteIf(ok bool, s string) []byte {
	if !ok {
		return nil
	}
	return jsonstr.Quote(s)
}

func (m *memo) put(e *memoEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.items[e.key]; ok {
		el.Value = e
		m.order.MoveToFront(el)
		return
	}
	m.items[e.key] = m.order.PushFront(e)
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
