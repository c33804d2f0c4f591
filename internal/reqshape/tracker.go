package reqshape

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
)

// KV stores small values per conversation across restarts, PutLater
// returning at once and writing in the background; *ledger.Store
// implements it.
type KV interface {
	Get(bucket, conversation, key string) ([]byte, bool, error)
	PutLater(bucket, conversation, key string, value []byte) error
}

// The ledger bucket and key of a conversation's batch-shaped blocks.
const (
	kvBucket  = "shaping"
	kvBatched = "batched"
)

// blockKey identifies a reasoning block by its original text.
type blockKey [16]byte

func keyOf(original string) blockKey {
	s := sha256.Sum256([]byte(original))
	return blockKey(s[:16])
}

// prints are the fingerprints of what one request rendered: its
// top-level keys that reach the prompt (model, tools, effort, template
// variables) and each message as the upstream renders it (a block's
// reasoning counts only where it is rendered).
//
// A conversation's requests re-send its history, and their prints agree
// on it: they share one array (extend), each request's prints a prefix of
// it, which no one changes once written. end is how far the array is
// written (nil: not to be shared); a request whose prints are those of
// the ones before it and more writes the more in place, when it is the
// first to do so.
type prints struct {
	head uint64
	msgs []uint64
	end  *atomic.Int32
}

// extend returns the prints of a request of n = k+len(tail) messages
// whose first k prints are p's and the others tail (tail is not kept):
// p's array when they agree with p's as far as both go and the array has
// the room (written past p's only by the first request to get there), a
// new one otherwise: with room for the next requests' messages when grow
// (the prints go in a carry, whence the next request extends them), of
// their size, not to be shared, when not.
func (p prints) extend(head uint64, k int, tail []uint64, grow bool) prints {
	n, m := k+len(tail), len(p.msgs)
	if p.end != nil && k <= m {
		switch {
		case n <= m && cap(p.msgs) <= 2*n+16 && slices.Equal(p.msgs[k:n], tail): // not a long array for short prints
			return prints{head: head, msgs: p.msgs[:n], end: p.end}
		case n > m && n <= cap(p.msgs) && slices.Equal(p.msgs[k:m], tail[:m-k]) &&
			p.end.CompareAndSwap(int32(m), int32(n)):
			copy(p.msgs[m:n], tail[m-k:])
			return prints{head: head, msgs: p.msgs[:n], end: p.end}
		}
	}
	var out prints
	if grow {
		out = prints{head: head, msgs: make([]uint64, n, n+n/8+8), end: new(atomic.Int32)}
		out.end.Store(int32(n))
	} else {
		out = prints{head: head, msgs: make([]uint64, n)}
	}
	copy(out.msgs, p.msgs[:k])
	copy(out.msgs[k:], tail)
	return out
}

// breakAt returns the first message whose rendering differs between the
// previous request (prev) and this one, 0 when the head differs, or -1
// when this request extends prev (or there is no prev).
func breakAt(prev, cur prints) int {
	if prev.msgs == nil {
		return -1
	}
	if prev.head != cur.head {
		return 0
	}
	for i := range min(len(prev.msgs), len(cur.msgs)) {
		if prev.msgs[i] != cur.msgs[i] {
			return i
		}
	}
	return -1
}

var printSeed = maphash.MakeSeed()

// headKeys are the top-level keys whose change changes the whole prompt.
var headKeys = []string{"model", "tools", "reasoning_effort", "thinking", "reasoning", "chat_template_kwargs", "response_format"}

// headPrint fingerprints the head keys of req. Each key's first value
// counts, as a gjson lookup finds it; the values come from the view's
// top-level members, so the body is not scanned again (seven lookups used
// to scan a history of a megabyte seven times).
func headPrint(req *conv.Request) uint64 {
	var h maphash.Hash
	h.SetSeed(printSeed)
	for _, k := range headKeys {
		h.WriteString(k)
		if f, ok := req.Field(k); ok {
			if rk := f.RawKey(); rk != (conv.RawKey{}) {
				// The value's key, made when it was read or carried from
				// the previous request: the tools are not hashed again.
				var b [17]byte
				b[0] = 1
				binary.LittleEndian.PutUint64(b[1:], rk[0])
				binary.LittleEndian.PutUint64(b[9:], rk[1])
				h.Write(b[:])
			} else {
				h.Write(req.Body[f.Start:f.End])
			}
		}
		h.WriteByte(0)
	}
	return h.Sum64()
}

// messagePrint fingerprints message m as sent: reasoning is the text sent
// for its reasoning, counted only when rendered; content the visible text
// sent. The print is made of the hashes of the message's parts (partPrints);
// h, when not nil, holds them for m as the client sent it.
func messagePrint(m *conv.Message, content, reasoning string, rendered bool, h *partPrints) uint64 {
	if h == nil {
		p := partPrintsOf(m)
		h = &p
	}
	p := [4]uint64{h.fixed, h.content, 0, 0}
	if content != m.Content {
		p[1] = stringPrint(content)
	}
	if rendered {
		p[2], p[3] = 1, h.reasoning
		if reasoning != m.Reasoning {
			p[3] = stringPrint(reasoning)
		}
	}
	return maphash.Comparable(printSeed, p)
}

// partPrints are the hashes of a message's parts, as the client sent it:
// what does not change (role, name, tool call id, images, tool calls), its
// content and its reasoning.
type partPrints struct {
	fixed, content, reasoning uint64
}

func partPrintsOf(m *conv.Message) partPrints {
	var h maphash.Hash
	h.SetSeed(printSeed)
	for _, s := range []string{m.Role, m.Name, m.ToolCallID} {
		h.WriteString(s)
		h.WriteByte(0)
	}
	if m.Images > 0 {
		maphash.WriteComparable(&h, m.Images)
	}
	for _, c := range m.ToolCalls {
		for _, s := range []string{c.ID, c.Name, c.Arguments} {
			h.WriteString(s)
			h.WriteByte(0)
		}
	}
	return partPrints{fixed: h.Sum64(), content: stringPrint(m.Content), reasoning: stringPrint(m.Reasoning)}
}

func stringPrint(s string) uint64 { return maphash.String(printSeed, s) }

// printMemo remembers each message's partPrints by the key of its bytes
// (the same bytes hold the same parts), so that the history an agent
// re-sends is hashed once, not once per request. It keeps two
// generations: when the current one holds max/2 messages it becomes the
// old one, and a message found in the old one moves to the current one,
// so a history in use is never forgotten all at once; it holds at most
// max messages. It is safe for concurrent use.
type printMemo struct {
	mu       sync.Mutex
	cur, old map[conv.RawKey]partPrints
	max      int
	// last is the parts last set at each message's place, whichever
	// request set them, tried before the maps (a message found there is
	// not looked up: its generation is not renewed).
	last resolved.Places[conv.RawKey, partPrints]
}

func newPrintMemo(max int) *printMemo {
	return &printMemo{cur: make(map[conv.RawKey]partPrints), max: max}
}

// of returns the partPrints of every message of req from the k-th (the
// first k are not asked for: their prints are carried), appended to out
// (nil: a new slice): those carried in from (nil: none) as they are,
// those remembered under one lock, the others hashed outside it.
func (pm *printMemo) of(req *conv.Request, out []partPrints, from *carry, k int) []partPrints {
	n := len(req.Messages)
	out = slices.Grow(out[:0], n)[:n]
	rest := k // the first message not carried
	for ; rest < n; rest++ {
		pc := from.at(rest, &req.Messages[rest])
		if pc == nil || !pc.hasParts {
			break
		}
		out[rest] = pc.parts
	}
	if rest == n {
		return out // the memo's places are not begun: its last request's stand
	}
	var missing []int // made only when a message is not remembered
	pm.mu.Lock()
	pm.last.Begin(n)
	for i := rest; i < n; i++ {
		k := req.Messages[i].RawKey()
		if p, ok := pm.last.Get(i, k); ok {
			out[i] = p
		} else if p, ok := pm.cur[k]; ok {
			out[i] = p
		} else if p, ok := pm.old[k]; ok {
			out[i] = p
			pm.put(k, p)
		} else {
			missing = append(missing, i) // its place is set once its parts are made
			continue
		}
		pm.last.Set(i, k, out[i])
	}
	pm.mu.Unlock()
	if len(missing) == 0 {
		return out
	}
	for _, i := range missing {
		out[i] = partPrintsOf(&req.Messages[i])
	}
	pm.mu.Lock()
	defer pm.mu.Unlock()
	for _, i := range missing {
		k := req.Messages[i].RawKey()
		pm.put(k, out[i])
		pm.last.Set(i, k, out[i]) // a right pair, whichever request began the places since

	}
	return out
}

// put adds a message to the current generation, starting a new one when
// it is full. Under mu.
func (pm *printMemo) put(k conv.RawKey, p partPrints) {
	if len(pm.cur) >= max(1, pm.max/2) {
		pm.old, pm.cur = pm.cur, make(map[conv.RawKey]partPrints, len(pm.cur))
	}
	pm.cur[k] = p
}

// convState is what the shaper remembers of one conversation.
type convState struct {
	key     string
	prev    prints
	batched map[blockKey]bool
}

// tracker remembers, for a bounded number of conversations, the
// fingerprints of the last request and the blocks shaped at a cache break
// (those also in kv, which writes them in the background). It is safe for
// concurrent use.
type tracker struct {
	kv  KV
	max int

	mu     sync.Mutex
	order  *list.List // front = most recent; values are *convState
	convs  map[string]*list.Element
	bytes  int // of the conversations' prints and sets (convState.size)
	closed bool
}

// historyConversations bounds the conversations remembered in memory, and
// trackedBytes what they hold: a request's prints take 8 bytes a message
// of their array (up to conv.MaxMessages; the array may have room for, or
// hold, a later request's: counted whole), and a set 40 bytes a block. maxBatched bounds
// one conversation's set: a block shaped at a break past it is not
// tracked (its later requests may render it otherwise: a cache miss, not
// an invalid request).
const (
	historyConversations = 1024
	maxBatched           = 1 << 16
	batchedEntryBytes    = 40 // a map entry of a 16-byte key, about
)

var trackedBytes = 64 << 20 // a variable for the tests

// size is the memory st holds.
func (st *convState) size() int { return 8*cap(st.prev.msgs) + batchedEntryBytes*len(st.batched) }

func newTracker(kv KV, max int) *tracker {
	return &tracker{kv: kv, max: max, order: list.New(), convs: map[string]*list.Element{}}
}

// state returns the conversation's previous prints and batch set,
// loading the set from kv the first time the conversation is seen. The set
// is never changed once returned (record replaces it), so the caller reads
// it without a lock and without a copy.
func (h *tracker) state(conversation string) (prints, map[blockKey]bool) {
	h.mu.Lock()
	if el, ok := h.convs[conversation]; ok {
		h.order.MoveToFront(el)
		st := el.Value.(*convState)
		defer h.mu.Unlock()
		return st.prev, st.batched
	}
	h.mu.Unlock()
	batched := h.load(conversation)
	h.mu.Lock()
	defer h.mu.Unlock()
	if el, ok := h.convs[conversation]; ok { // loaded meanwhile by another request
		st := el.Value.(*convState)
		return st.prev, st.batched
	}
	h.put(&convState{key: conversation, batched: batched})
	return prints{}, batched
}

// with returns a copy of m with keys added (m itself when none is new).
func with(m map[blockKey]bool, keys []blockKey) map[blockKey]bool {
	var out map[blockKey]bool
	for _, k := range keys {
		if m[k] || out[k] {
			continue
		}
		if out == nil {
			out = make(map[blockKey]bool, len(m)+len(keys))
			for k := range m {
				out[k] = true
			}
		}
		out[k] = true
	}
	if out == nil {
		return m
	}
	return out
}

// load reads the conversation's batch set from kv.
func (h *tracker) load(conversation string) map[blockKey]bool {
	out := map[blockKey]bool{}
	if h.kv == nil {
		return out
	}
	v, ok, err := h.kv.Get(kvBucket, conversation, kvBatched)
	if err != nil || !ok {
		return out
	}
	for len(v) >= len(blockKey{}) {
		out[blockKey(v[:16])] = true
		v = v[16:]
	}
	return out
}

// put adds st as the most recent conversation, forgetting the oldest
// beyond max or trackedBytes. h.mu is held.
func (h *tracker) put(st *convState) {
	h.convs[st.key] = h.order.PushFront(st)
	h.bytes += st.size()
	h.trim()
}

// trim forgets the oldest conversations beyond max or trackedBytes (never
// the most recent). h.mu is held.
func (h *tracker) trim() {
	for h.order.Len() > h.max || h.bytes > trackedBytes && h.order.Len() > 1 {
		old := h.order.Back()
		h.order.Remove(old)
		st := old.Value.(*convState)
		delete(h.convs, st.key)
		h.bytes -= st.size()
	}
}

// record keeps the prints of the request just sent and the blocks shaped
// at a break in it (added to the conversation's set, which kv then writes
// in the background: it never blocks, so holding the lock is fine, and the
// sets reach it in the order they were made). read is the set state
// returned for this request: when the conversation was forgotten in
// between (other conversations pushed it out), it starts again from that
// set, not from an empty one that kv would then write over the whole.
func (h *tracker) record(conversation string, read map[blockKey]bool, p prints, added []blockKey) {
	h.mu.Lock()
	defer h.mu.Unlock()
	el, ok := h.convs[conversation]
	if !ok {
		if read == nil {
			read = map[blockKey]bool{}
		}
		h.put(&convState{key: conversation, batched: read})
		el = h.convs[conversation]
	}
	st := el.Value.(*convState)
	h.bytes -= st.size()
	st.prev = p
	before := len(st.batched)
	added = added[:min(len(added), max(0, maxBatched-before))]
	st.batched = with(st.batched, added) // a new map: readers may hold the old one
	h.bytes += st.size()
	h.order.MoveToFront(el)
	h.trim()
	if len(st.batched) == before || h.kv == nil || h.closed {
		return
	}
	v := make([]byte, 0, len(st.batched)*len(blockKey{}))
	for k := range st.batched {
		v = append(v, k[:]...)
	}
	_ = h.kv.PutLater(kvBucket, conversation, kvBatched, v) // a failure leaves the set in memory; a restart forgets it
}

// Close stops recording sets in kv (the kv's own Close writes what it
// holds).
func (h *tracker) Close() error {
	h.mu.Lock()
	h.closed = true
	h.mu.Unlock()
	return nil
}
