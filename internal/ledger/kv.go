package ledger

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	bolt "go.etcd.io/bbolt"
)

// The named values (Put, PutLater, Get, Delete) are served from memory:
// from the queue until they are on disk, then, up to 64 KiB, from a
// bounded cache after their first read; PutLater writes them in the
// background: the guard changes a conversation's state on many requests,
// and a request must not wait for an fsync (a few milliseconds on a good
// disk, seconds on a busy one).
//
// Writes of PutLater are applied in the order of the values (the last
// value of a key wins) by one goroutine, many to a transaction: one fsync
// for all the values queued meanwhile. A commit costs about 0.3 ms of CPU
// here (the fsync's share in the kernel included), three times what the
// proxy spends on a small request, and the guard queues a value whenever
// a conversation's state changes, so the writer commits at most once per
// writeEvery (BenchmarkPutLaterPaced): the first value after a quiet
// spell goes at once, the ones that follow it wait for the next commit. A
// value reaches the disk within writeEvery and one transaction of its
// PutLater, so a crash loses only the values of the last moments; Close
// and Flush write everything queued without waiting. A
// write that fails (a full disk) is lost and counted (Stats): the value
// stays in memory, so the process goes on with it, and a restart goes back
// to the last value on disk, as after a crash. Put, Delete and
// ClearConversation still commit before they return, and never lose to a
// PutLater value queued before them.

// kvID names one value.
type kvID struct{ bucket, conversation, key string }

// kvEntry is a value known in memory: ok is false for a value known to be
// absent.
type kvEntry struct {
	value []byte
	ok    bool
}

// Bounds of the memory kept for values.
const (
	maxCached      = 1 << 16 // values (or absences) kept in memory
	maxCachedBytes = 16 << 20
	maxCachedValue = 64 << 10 // larger values are read from the file each time
	maxPending     = 1 << 16  // values waiting for the writer; past it PutLater loses (counted)
)

// maxPendingBytes bounds the bytes of the values waiting for the writer
// (a variable for the tests): a value is as large as a client's history
// makes it (the shaper's set of blocks), and a slow disk must not turn
// the queue into all the memory there is. Past it PutLater loses, as past
// maxPending.
var maxPendingBytes = 64 << 20

// kvState is the Store's memory of values and its background writer.
type kvState struct {
	mu      sync.Mutex
	cond    *sync.Cond // signalled when a batch is written
	cache   map[kvID]kvEntry
	bytes   int
	pending map[kvID][]byte
	queued  int             // the bytes of the pending values
	writing map[kvID][]byte // the batch the writer took from pending, until it is on disk
	busy    bool            // the writer holds a batch taken from pending
	gen     uint64          // counts changes to memory: a file read older than one is not learned
	closed  bool
	wake    chan struct{} // values are queued
	urgent  chan struct{} // a Flush waits: write without waiting for every
	every   time.Duration // writeEvery when the Store opened
	stop    chan struct{} // closed by Close
	done    chan struct{}

	writeMu sync.Mutex // serializes the writer's batches with Put, Delete and ClearConversation

	written, lost, commits atomic.Int64
}

// writeEvery is the least time between two of the writer's commits (a
// variable for the tests, read when a Store opens).
var writeEvery = 50 * time.Millisecond

func (k *kvState) init() {
	k.cond = sync.NewCond(&k.mu)
	k.cache = make(map[kvID]kvEntry)
	k.pending = make(map[kvID][]byte)
	k.wake = make(chan struct{}, 1)
	k.urgent = make(chan struct{}, 1)
	k.every = writeEvery
	k.stop = make(chan struct{})
	k.done = make(chan struct{})
}

// Stats are the counters of PutLater's writer.
type Stats struct {
	Written int64 // values written by the background writer
	Lost    int64 // values it could not write (a write error, or too many or too many bytes queued)
	Pending int   // values waiting now
	Commits int64 // the writer's transactions
}

// Stats returns the background writer's counters.
func (s *Store) Stats() Stats {
	s.kv.mu.Lock()
	n := len(s.kv.pending)
	s.kv.mu.Unlock()
	return Stats{Written: s.kv.written.Load(), Lost: s.kv.lost.Load(), Pending: n, Commits: s.kv.commits.Load()}
}

// remember records e for id in memory; h.mu is held. Values too large to
// keep are forgotten instead, and the oldest-looking entries make room
// (map order: any clean entry may go, it is read again when needed).
func (k *kvState) remember(id kvID, e kvEntry) {
	k.gen++
	if old, ok := k.cache[id]; ok {
		k.bytes -= len(old.value)
		delete(k.cache, id)
	}
	if len(e.value) > maxCachedValue {
		return
	}
	for id2, old := range k.cache {
		if len(k.cache) < maxCached && k.bytes+len(e.value) <= maxCachedBytes {
			break
		}
		if _, p := k.pending[id2]; !p {
			k.bytes -= len(old.value)
			delete(k.cache, id2)
		}
	}
	k.cache[id] = e
	k.bytes += len(e.value)
}

// forget drops what memory holds for id (a PutLater not yet written
// included); k.mu is held.
func (k *kvState) forget(id kvID) {
	k.gen++
	if old, ok := k.cache[id]; ok {
		k.bytes -= len(old.value)
		delete(k.cache, id)
	}
	k.unqueue(id)
}

// queue adds value for id to the values waiting for the writer (in place
// of one waiting for id); k.mu is held.
func (k *kvState) queue(id kvID, value []byte) {
	k.unqueue(id)
	k.pending[id] = value
	k.queued += len(value)
}

// unqueue drops the value waiting for id, if one is; k.mu is held.
func (k *kvState) unqueue(id kvID) {
	if old, ok := k.pending[id]; ok {
		k.queued -= len(old)
		delete(k.pending, id)
	}
}

// roomFor reports whether value may wait for the writer as id's: within
// maxPending values and maxPendingBytes bytes, counting the value it
// replaces as gone; k.mu is held.
func (k *kvState) roomFor(id kvID, value []byte) bool {
	old, replaces := k.pending[id]
	if !replaces && len(k.pending) >= maxPending {
		return false
	}
	return k.queued-len(old)+len(value) <= maxPendingBytes
}

// forgetConversations drops every value memory holds of the named
// conversations, the queued ones too unless keepQueued (a value queued
// after Purge found the conversation idle brings it back, as a Put
// would); one pass over memory however many are named; k.mu is held.
func (k *kvState) forgetConversations(names map[string]bool, keepQueued bool) {
	k.gen++
	for id, old := range k.cache {
		if _, queued := k.pending[id]; names[id.conversation] && !(queued && keepQueued) {
			k.bytes -= len(old.value)
			delete(k.cache, id)
		}
	}
	if keepQueued {
		return
	}
	for id := range k.pending {
		if names[id.conversation] {
			k.unqueue(id)
		}
	}
}

// PutLater stores value like Put, but returns at once: the value is read
// back at once from memory (Get), and written to the file in the
// background (see the file's comment for what a crash or a write error
// loses). value must not be modified afterwards. It fails only for an
// invalid argument or a closed Store.
func (s *Store) PutLater(bucket, conversation, key string, value []byte) error {
	if err := checkKV(bucket, key); err != nil {
		return err
	}
	if err := checkName("conversation", conversation, maxConversationLen); err != nil {
		return err
	}
	if value == nil {
		value = []byte{}
	}
	id := kvID{bucket, conversation, key}
	k := &s.kv
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return errClosed
	}
	if !k.roomFor(id, value) {
		k.forget(id) // as after a restart: the file's value is read again
		k.lost.Add(1)
		return nil
	}
	k.queue(id, value)
	k.remember(id, kvEntry{value: value, ok: true})
	select {
	case k.wake <- struct{}{}:
	default:
	}
	return nil
}

// Flush waits until every value PutLater queued before it is written (or
// lost to a write error).
func (s *Store) Flush() {
	k := &s.kv
	k.mu.Lock()
	defer k.mu.Unlock()
	for (len(k.pending) > 0 || k.busy) && !k.closed {
		for _, c := range []chan struct{}{k.wake, k.urgent} {
			select {
			case c <- struct{}{}:
			default:
			}
		}
		k.cond.Wait()
	}
}

// writer writes what PutLater queued until the Store closes, then what is
// left.
func (s *Store) writer() {
	k := &s.kv
	defer close(k.done)
	t := time.NewTimer(k.every)
	t.Stop()
	for range k.wake {
		if !s.writeBatch() {
			continue // nothing was queued: the next value goes at once
		}
		t.Reset(k.every)
		select {
		case <-t.C:
		case <-k.urgent:
			t.Stop()
		case <-k.stop:
			t.Stop()
		}
	}
	s.writeBatch()
}

// writeBatch writes every queued value in one transaction; false when
// none was queued.
func (s *Store) writeBatch() bool {
	k := &s.kv
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	k.mu.Lock()
	batch := k.pending
	if len(batch) == 0 {
		k.mu.Unlock()
		return false
	}
	k.pending, k.queued, k.writing, k.busy = make(map[kvID][]byte), 0, batch, true
	k.mu.Unlock()
	err := s.update(func(tx *bolt.Tx) error {
		for id, v := range batch {
			if err := putKV(tx, s.opts.Now(), id, v); err != nil {
				return err
			}
		}
		return nil
	})
	k.commits.Add(1)
	if err != nil {
		k.lost.Add(int64(len(batch)))
	} else {
		k.written.Add(int64(len(batch)))
	}
	k.mu.Lock()
	k.busy, k.writing = false, nil
	k.gen++ // what a Get read from the file before this commit is not learned
	k.cond.Broadcast()
	k.mu.Unlock()
	return true
}

// putKV writes one value in tx, as Put does.
func putKV(tx *bolt.Tx, now time.Time, id kvID, value []byte) error {
	cb, err := tx.Bucket(bucketConv).CreateBucketIfNotExists([]byte(id.conversation))
	if err != nil {
		return err
	}
	if err := cb.Put(keySeen, encodeTime(now)); err != nil {
		return err
	}
	kv, err := sub(cb, bucketKV, true)
	if err == nil {
		kv, err = sub(kv, []byte(id.bucket), true)
	}
	if err != nil {
		return err
	}
	return kv.Put([]byte(id.key), value)
}

// cached returns what memory knows of id: a value queued or being
// written (whatever its size: larger values are not kept in the cache),
// else the cache's; gen is the memory's generation, for learn.
func (k *kvState) cached(id kvID) (e kvEntry, hit bool, gen uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if v, ok := k.pending[id]; ok {
		return kvEntry{value: v, ok: true}, true, k.gen
	}
	if v, ok := k.writing[id]; ok {
		return kvEntry{value: v, ok: true}, true, k.gen
	}
	e, hit = k.cache[id]
	return e, hit, k.gen
}

// learn records a value read from the file, unless memory changed since
// the read began (gen): the file may then be older than memory.
func (k *kvState) learn(id kvID, e kvEntry, gen uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.gen == gen && !k.closed {
		k.remember(id, e)
	}
}

func cloneValue(v []byte) []byte {
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	return out
}

// Collectors are the background writer's metrics: values written, and
// values lost (a write error, or too many or too many bytes queued).
func Collectors(s *Store) []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shaperproxy_state_writes_total", Help: "Values of state.db written by its background writer (the guard's state).",
		}, func() float64 { return float64(s.Stats().Written) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shaperproxy_state_writes_lost_total", Help: "Values of state.db its background writer lost to a write error or a full queue; the process went on with them, a restart goes back to the file's.",
		}, func() float64 { return float64(s.Stats().Lost) }),
	}
}
