package originals

import (
	"fmt"
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// maxBatch is the most operations a Writer commits in one transaction.
const maxBatch = 256

// turnReserve is the room in a Writer's queue kept for BeginTurn, so a
// queue full of Puts does not reorder a turn change.
const turnReserve = 64

// Writer applies Puts and BeginTurns to a Store from one goroutine, so a
// request never waits for a disk. Operations are applied in the order they
// were queued, many to a transaction (one fsync for all of them), at most
// one transaction per commitEvery while there is no backlog: a commit
// costs about 0.3 ms of CPU (the fsync's share in the kernel included)
// and an agent's loop shapes a new block on most of its requests. The
// first operation after a quiet spell is applied at once; a backlog (a
// full batch taken or waiting) is written commit after commit; Flush and
// Close end a pause.
//
// Put never blocks: when the queue is full the entries are dropped and
// counted (Dropped). BeginTurn never blocks and is never dropped: it has
// room of its own in the queue, and if even that is full it is applied
// after the operations waiting (clearing is disk hygiene and must happen;
// deleting earlier turns late never deletes the new turn's entries).
//
// A Writer is safe for concurrent use. Close it before its Store.
type Writer struct {
	s      *Store
	queue  int
	ops    chan op
	wake   chan struct{} // there are overflowing turns
	urgent chan struct{} // a Flush or Close waits: no pause before the next commit
	every  time.Duration // commitEvery when the Writer started
	done   chan struct{} // closed when the goroutine ends

	mu     sync.RWMutex // guards closed; read-locked around sends
	closed bool

	omu      sync.Mutex
	overflow map[string]int // conversation -> turn of a BeginTurn that found no room

	bmu     sync.Mutex
	begun   map[string]int // conversation -> turn last begun (at most maxBegun)
	queuedB int            // BeginTurns queued, for tests
	put     putMemo        // entries already queued, per conversation and turn

	queuedBytes      atomic.Int64 // text of the queued entries, bounded by maxQueuedBytes
	dropped, failed  atomic.Int64
	refused, evicted atomic.Int64
	commits          atomic.Int64 // transactions, for tests and the benchmark
	reportedDrops    int64        // dropped as last handed to the loss log (loop only)
	errMu            sync.Mutex
	err              error
}

type op struct {
	entries []Entry
	bytes   int64 // the entries' text, counted in queuedBytes
	conv    string
	turn    int
	begin   bool
	flush   chan struct{}
	stop    bool
}

// Async starts a Writer with room for queue pending Puts (at least 1).
func (s *Store) Async(queue int) *Writer {
	queue = max(queue, 1)
	w := &Writer{
		s:        s,
		queue:    queue,
		ops:      make(chan op, queue+turnReserve),
		wake:     make(chan struct{}, 1),
		urgent:   make(chan struct{}, 1),
		every:    commitEvery,
		done:     make(chan struct{}),
		overflow: make(map[string]int),
		put:      putMemo{now: time.Now, refresh: s.opts.TTL / 2}, // not the store's clock: Put runs on the request path
	}
	go w.loop()
	return w
}

// Put queues the entries of one request (see Store.Put) and returns at once.
// The Writer keeps the slice until it is written: do not modify it. If the
// queue is full or the Writer is closed the entries are dropped and counted.
//
// An agent re-sends the blocks of the turn in progress with every step of
// it: entries already queued in the same conversation and turn are not
// queued again (that would be a transaction per request that changes
// nothing).
func (w *Writer) Put(entries []Entry) {
	// Remembered before they are queued, so that a commit that fails
	// forgets them whenever it runs; forgotten again if they are dropped.
	w.bmu.Lock()
	entries = w.put.admit(entries)
	w.bmu.Unlock()
	if len(entries) == 0 {
		return
	}
	n := textBytes(entries)
	w.mu.RLock()
	defer w.mu.RUnlock()
	if !w.closed && len(w.ops) < w.queue {
		if q := w.queuedBytes.Add(n); q <= maxQueuedBytes || q == n {
			own(entries) // only what is queued is copied
			select {
			case w.ops <- op{entries: entries, bytes: n}:
				return
			default:
			}
		}
		w.queuedBytes.Add(-n)
	}
	w.bmu.Lock()
	w.put.convs = nil
	w.bmu.Unlock()
	w.dropped.Add(int64(len(entries)))
}

// maxQueuedBytes bounds the text of the entries waiting for the writer
// (the batch being written is held besides): an entry's original is as
// long as a model's reasoning, and a disk that stalls must not hold
// queue × that. Past it Puts are dropped and counted, as when the queue
// is full. (A variable for the tests.)
var maxQueuedBytes int64 = 64 << 20

// own makes the entries' texts copies of their own: the shaper's
// originals are strings of the request body, and a queued entry would
// keep the whole body alive until it is written.
func own(entries []Entry) {
	for i := range entries {
		e := &entries[i]
		e.Original, e.Shaped, e.Conversation = strings.Clone(e.Original), strings.Clone(e.Shaped), strings.Clone(e.Conversation)
	}
}

// textBytes returns the bytes of the entries' texts.
func textBytes(entries []Entry) int64 {
	n := 0
	for i := range entries {
		n += len(entries[i].Original) + len(entries[i].Shaped) + len(entries[i].Conversation)
	}
	return int64(n)
}

// putMemo remembers, per conversation, the turn of its last queued
// entries and which shaped texts they held. It is bounded: past
// maxBegun conversations or maxPutKeys texts in one it starts over, and
// it forgets everything when a commit refused, evicted or failed
// (forgetting costs one transaction more, never an entry).
//
// A conversation's memo lasts refresh (half the table's TTL): an entry
// re-sent after that is queued again, which keeps the conversation seen
// while its turn goes on. Otherwise a turn paused past the TTL would have
// its entries purged and never stored again.
type putMemo struct {
	seed    maphash.Seed
	convs   map[string]*turnPuts
	now     func() time.Time
	refresh time.Duration
}

type turnPuts struct {
	turn int
	at   time.Time // when the memo of this turn began
	keys map[putKey]struct{}
}

// current reports whether t is the memo of turn, young enough to skip by.
func (m *putMemo) current(t *turnPuts, turn int, now time.Time) bool {
	return t != nil && t.turn == turn && now.Sub(t.at) < m.refresh
}

// putKey names an entry: the hashes and lengths of its shaped text and
// its original (the table keeps every original a shaped text stands for;
// a collision would need all four, in one conversation and turn).
type putKey struct {
	shaped, original   uint64
	nShaped, nOriginal int
}

const maxPutKeys = 1 << 14

func (m *putMemo) key(e *Entry) putKey {
	return putKey{maphash.String(m.seed, e.Shaped), maphash.String(m.seed, e.Original), len(e.Shaped), len(e.Original)}
}

// admit returns the entries not yet queued for their conversation and
// turn (entries itself when all are new), and records them as queued:
// one hash of each entry.
func (m *putMemo) admit(entries []Entry) []Entry {
	if m.convs == nil || len(m.convs) >= maxBegun {
		m.seed, m.convs = maphash.MakeSeed(), map[string]*turnPuts{}
	}
	var out []Entry // nil while every entry so far is new
	now := m.now()  // one reading of the clock for the batch
	for i := range entries {
		e := &entries[i]
		t := m.convs[e.Conversation]
		if !m.current(t, e.Turn, now) || len(t.keys) >= maxPutKeys {
			t = &turnPuts{turn: e.Turn, at: now, keys: map[putKey]struct{}{}}
			m.convs[e.Conversation] = t
		}
		k := m.key(e)
		if _, dup := t.keys[k]; dup {
			if out == nil {
				out = append(make([]Entry, 0, len(entries)), entries[:i]...)
			}
			continue
		}
		t.keys[k] = struct{}{}
		if out != nil {
			out = append(out, *e)
		}
	}
	if out == nil {
		return entries
	}
	return out
}

// maxBegun bounds the conversations whose last begun turn the Writer
// remembers; forgetting one only costs one transaction more.
const maxBegun = 4096

// BeginTurn queues Store.BeginTurn(conv, turn) after the operations already
// queued, and returns at once. The turn a conversation last began is
// remembered: beginning it again (a retry, a regenerate, a client that
// sends the same request twice) costs no transaction. It is ignored after
// Close.
func (w *Writer) BeginTurn(conv string, turn int) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed || !w.firstBegin(conv, turn) {
		return
	}
	select {
	case w.ops <- op{begin: true, conv: conv, turn: turn}:
		return
	default:
	}
	w.omu.Lock()
	w.overflow[conv] = turn
	w.omu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// firstBegin records turn as conv's last begun turn and reports whether it
// was not already.
func (w *Writer) firstBegin(conv string, turn int) bool {
	w.bmu.Lock()
	defer w.bmu.Unlock()
	if w.begun == nil || len(w.begun) >= maxBegun {
		w.begun = map[string]int{}
	}
	if t, ok := w.begun[conv]; ok && t == turn {
		return false
	}
	w.begun[conv] = turn
	w.queuedB++
	return true
}

// Flush waits until everything queued before it has been applied.
func (w *Writer) Flush() {
	ch := make(chan struct{})
	w.hurry() // a pause ends, and the queue ahead of the Flush goes
	select {
	case w.ops <- op{flush: ch}:
	case <-w.done:
		return
	}
	w.hurry() // again: the first signal may have ended a pause before the Flush was queued
	select {
	case <-ch:
	case <-w.done:
	}
}

// Close applies what is queued, stops the goroutine and returns Err. Later
// Puts are dropped and counted; later BeginTurns are ignored.
func (w *Writer) Close() error {
	w.mu.Lock()
	first := !w.closed
	w.closed = true
	w.mu.Unlock()
	if first {
		w.hurry()
		w.ops <- op{stop: true}
		w.hurry()
	}
	<-w.done
	return w.Err()
}

// hurry ends the writer's pause between commits.
func (w *Writer) hurry() {
	select {
	case w.urgent <- struct{}{}:
	default:
	}
}

// commitEvery is the least time between two of a Writer's commits while
// there is no backlog (a variable for the tests, read by Async).
var commitEvery = 50 * time.Millisecond

// Dropped returns how many entries Put dropped because the queue was full
// or the Writer closed.
func (w *Writer) Dropped() int64 { return w.dropped.Load() }

// Failed returns how many queued entries were lost to write errors.
func (w *Writer) Failed() int64 { return w.failed.Load() }

// Refused returns how many queued entries were not recorded because the
// table was full even after making room (see Options.MaxBytes).
func (w *Writer) Refused() int64 { return w.refused.Load() }

// Evicted returns how many conversations were removed before their TTL to
// make room for newer entries.
func (w *Writer) Evicted() int64 { return w.evicted.Load() }

// Err returns the last write error, or nil.
func (w *Writer) Err() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

func (w *Writer) fail(err error, entries int) {
	w.failed.Add(int64(entries))
	w.errMu.Lock()
	w.err = err
	w.errMu.Unlock()
	w.s.opts.OnError(err)
	w.s.losses.add(losses{failed: int64(entries), errors: 1}, err)
}

// report hands the entries Put dropped since the last call to the loss
// log, which warns when a line is due (at once when force).
func (w *Writer) report(force bool) {
	if d := w.dropped.Load(); d != w.reportedDrops {
		w.s.losses.add(losses{dropped: d - w.reportedDrops}, nil)
		w.reportedDrops = d
	}
	w.s.losses.flush(force)
}

func (w *Writer) loop() {
	defer close(w.done)
	tick := time.NewTicker(w.s.losses.every)
	defer tick.Stop()
	pause := time.NewTimer(w.every)
	pause.Stop()
	for stop := false; !stop; {
		var batch []op
		select {
		case o := <-w.ops:
			batch = append(batch, o)
		case <-w.wake:
		case <-tick.C:
			w.report(false)
			continue
		}
		batch = w.drain(batch)
		for _, o := range batch { // taken: the batch being written is held besides the bound
			w.queuedBytes.Add(-o.bytes)
		}
		var committed bool
		stop, committed = w.apply(batch)
		w.report(false)
		// A full batch, or one waiting, is a backlog: the next commit
		// follows at once (paused, the writer would take at most maxBatch
		// operations per commitEvery and drop Puts under a burst).
		if committed && !stop && len(batch) < maxBatch && len(w.ops) < maxBatch {
			pause.Reset(w.every)
			select {
			case <-pause.C:
			case <-w.urgent:
				pause.Stop()
			}
		}
	}
	w.apply(nil) // turns that overflowed just before Close
	w.report(true)
}

// drain adds to batch what is waiting in the queue, up to maxBatch.
func (w *Writer) drain(batch []op) []op {
	for len(batch) < maxBatch {
		select {
		case o := <-w.ops:
			batch = append(batch, o)
		default:
			return batch
		}
	}
	return batch
}

func (w *Writer) takeOverflow() map[string]int {
	w.omu.Lock()
	defer w.omu.Unlock()
	if len(w.overflow) == 0 {
		return nil
	}
	turns := w.overflow
	w.overflow = make(map[string]int)
	return turns
}

// apply commits batch, then the overflowing turns, in one transaction and
// releases the Flushes waiting on it. It reports whether batch asked to
// stop, and whether it committed.
func (w *Writer) apply(batch []op) (stop, committed bool) {
	batch, entries, began := w.valid(batch)
	turns := w.takeOverflow()
	if entries > 0 || began || len(turns) > 0 {
		w.commit(batch, turns, entries)
		committed = true
	}
	if began || len(turns) > 0 {
		if _, err := w.s.compactIfLarge(); err != nil {
			w.s.opts.OnError(err)
		}
	}
	for _, o := range batch {
		if o.flush != nil {
			close(o.flush)
		}
		stop = stop || o.stop
	}
	return stop, committed
}

// valid drops the invalid operations of batch (counting them as failed) and
// counts the entries and turn changes left.
func (w *Writer) valid(batch []op) (ok []op, entries int, began bool) {
	ok = batch[:0]
	for _, o := range batch {
		err := validateEntries(o.entries)
		if o.begin && err == nil {
			err = validate(o.conv, o.turn)
		}
		if err != nil {
			w.fail(err, len(o.entries))
			continue
		}
		entries += len(o.entries)
		began = began || o.begin
		ok = append(ok, o)
	}
	return ok, entries, began
}

// commit applies batch and the overflowing turns (see Store.commit) and
// counts what did not fit or failed.
func (w *Writer) commit(batch []op, turns map[string]int, entries int) {
	w.commits.Add(1)
	r, err := w.s.commit(batch, turns)
	if r != (room{}) || err != nil {
		// Entries may be missing from the table: whatever is sent again
		// must be written again.
		w.bmu.Lock()
		w.put.convs = nil
		w.bmu.Unlock()
	}
	if r != (room{}) {
		w.refused.Add(int64(r.refused))
		w.evicted.Add(int64(r.evicted))
		w.s.losses.add(losses{refused: int64(r.refused), evicted: int64(r.evicted)}, nil)
	}
	if err != nil {
		w.fail(fmt.Errorf("originals: writer: %w", err), entries)
	}
}

func applyOp(tx *bolt.Tx, o op, now time.Time) error {
	if o.begin {
		return beginTurnTx(tx, o.conv, o.turn, now)
	}
	return putTx(tx, o.entries, now)
}

func beginTurns(tx *bolt.Tx, turns map[string]int, now time.Time) error {
	for conv, turn := range turns {
		if validate(conv, turn) != nil {
			continue
		}
		if err := beginTurnTx(tx, conv, turn, now); err != nil {
			return err
		}
	}
	return nil
}
