package originals

import (
	"bytes"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// ErrFull is returned by Put when the entries would grow the file past
// its share of the free disk (see Options.MaxBytes).
var ErrFull = errors.New("originals: table is full")

// diskShare: the table's file grows into at most 1/diskShare of the
// space its file system has free, so it never takes the disk the capture
// log and the state need.
const diskShare = 4

// fileLimit returns the size the table's file may grow to now: MaxBytes
// (when positive), and its size plus a quarter of the free space. 0 means
// no limit.
//
// New entries get half of it: bbolt copies every page a transaction
// changes, so even a transaction that only deletes needs pages, and when
// entries had filled the file to the limit nothing could be cleared any
// more. Deletions (a new turn, a purge, making room) may use the rest.
func (s *Store) fileLimit() int64 {
	limit, _ := s.limits(true)
	return limit
}

// limits returns the file's limit (with MaxBytes when bounded, else the
// disk share alone; 0: none) and the limit of a transaction that only
// deletes: the file's limit, or its size when it is larger (a file made
// with a larger bound can still be cleared).
func (s *Store) limits(bounded bool) (file, deletion int64) {
	if bounded && s.opts.MaxBytes > 0 {
		file = s.opts.MaxBytes
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		return file, file
	}
	if free, ok := diskFree(filepath.Dir(s.Path())); ok {
		if disk := fi.Size() + max(free, 0)/diskShare; file == 0 || disk < file {
			file = disk
		}
	}
	if file == 0 {
		return 0, 0
	}
	return file, max(file, fi.Size())
}

// putLimit is the limit of a transaction that adds entries (see
// fileLimit).
func putLimit(limit int64) int64 { return limit / 2 }

// updateLimit runs fn in a write transaction whose pages stay within limit
// bytes (0: no limit): past it bbolt fails the commit with
// ErrMaxSizeReached instead of growing the file. bbolt keeps the limit on
// the DB, so every transaction sets its own.
func (s *Store) updateLimit(limit int64, fn func(*bolt.Tx) error) error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	return ownErr(s.db.Update(func(tx *bolt.Tx) error {
		tx.DB().MaxSize = int(min(limit, math.MaxInt))
		return fn(tx)
	}))
}

// room tells what a commit could not record.
type room struct {
	refused int // entries not recorded: the table was full
	evicted int // conversations removed to make room
}

// commit applies batch and then the turns that overflowed a Writer's
// queue in one transaction held to fileLimit; when the table is full it
// makes room (see makeRoom).
func (s *Store) commit(batch []op, turns map[string]int) (room, error) {
	limit := s.fileLimit()
	err := s.updateLimit(putLimit(limit), func(tx *bolt.Tx) error {
		now := s.opts.Now()
		for _, o := range batch {
			if err := applyOp(tx, o, now); err != nil {
				return err
			}
		}
		return beginTurns(tx, turns, now)
	})
	if !full(err) {
		return room{}, err
	}
	return s.makeRoom(batch, turns, limit)
}

// makeRoom runs when the batch did not fit. It applies the batch's turn
// changes (which only delete) and removes the conversations idle longest,
// other than the batch's own, until about twice the batch's bytes (at
// least an eighth of the limit, so that it does not run on every commit)
// are free. Then it tries the entries again, once more after a compaction
// if that would shrink the file, and then one Put at a time, newest
// first. Entries that still do not fit are refused: the newest turn of a
// conversation loses its originals rather than the table outgrowing its
// bound.
func (s *Store) makeRoom(batch []op, turns map[string]int, limit int64) (room, error) {
	entries := batchEntries(batch)
	evicted, err := s.clearAndEvict(batch, turns, max(2*entriesBytes(entries), limit/8))
	r := room{evicted: evicted}
	if err != nil || len(entries) == 0 {
		return r, err
	}
	if err = s.putLimited(entries); full(err) {
		if shrunk, cerr := s.compactIfShrinks(); cerr != nil {
			s.opts.OnError(cerr)
			s.losses.add(losses{errors: 1}, cerr)
		} else if shrunk {
			err = s.putLimited(entries)
		}
	}
	if !full(err) {
		return r, err
	}
	for i := len(batch) - 1; i >= 0; i-- { // one Put at a time, newest first
		if es := batch[i].entries; len(es) > 0 {
			if err := s.putLimited(es); full(err) {
				r.refused += len(es)
			} else if err != nil {
				return r, err
			}
		}
	}
	return r, nil
}

// clearAndEvict applies the turn changes of batch and turns, and removes
// conversations not written by them until about need bytes are free, in
// one transaction that only deletes; it returns how many it removed.
func (s *Store) clearAndEvict(batch []op, turns map[string]int, need int64) (int, error) {
	evicted := 0
	_, deletion := s.limits(true)
	err := s.updateLimit(deletion, func(tx *bolt.Tx) error {
		now := s.opts.Now()
		for _, o := range batch {
			if o.begin {
				if err := beginTurnTx(tx, o.conv, o.turn, now); err != nil {
					return err
				}
			}
		}
		if err := beginTurns(tx, turns, now); err != nil {
			return err
		}
		var err error
		evicted, err = evictTx(tx, need, batchConversations(batch, turns))
		return err
	})
	if err != nil {
		return 0, err // rolled back: nothing was removed
	}
	return evicted, nil
}

// putLimited records entries in one transaction held to putLimit.
func (s *Store) putLimited(entries []Entry) error {
	return s.updateLimit(putLimit(s.fileLimit()), func(tx *bolt.Tx) error { return putTx(tx, entries, s.opts.Now()) })
}

// full reports whether err says the table's file reached its limit.
func full(err error) bool { return errors.Is(err, bolterrors.ErrMaxSizeReached) }

// evictTx removes whole conversations, idle longest first and none of
// keep, until their entries held about need bytes; it returns how many it
// removed.
func evictTx(tx *bolt.Tx, need int64, keep map[string]bool) (int, error) {
	type candidate struct {
		name []byte
		seen time.Time
		size int64
	}
	root := tx.Bucket(bucketConv)
	var cs []candidate
	err := root.ForEachBucket(func(name []byte) error {
		if keep[string(name)] {
			return nil
		}
		cb := root.Bucket(name)
		c := candidate{name: bytes.Clone(name), seen: decodeMeta(cb.Get(keyMeta)).seen}
		if eb := cb.Bucket(bucketEntries); eb != nil {
			_ = eb.ForEach(func(k, v []byte) error { c.size += int64(len(k) + len(v)); return nil })
		}
		if c.size > 0 {
			cs = append(cs, c)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	sort.Slice(cs, func(i, j int) bool { return cs[i].seen.Before(cs[j].seen) })
	var freed int64
	n := 0
	for _, c := range cs {
		if freed >= need {
			break
		}
		if err := removeConv(tx, c.name); err != nil {
			return n, err
		}
		freed += c.size
		n++
	}
	return n, nil
}

// compactIfShrinks compacts when a compacted copy would be smaller than
// the file.
func (s *Store) compactIfShrinks() (bool, error) {
	if s.opts.ReadOnly {
		return false, nil
	}
	size, inUse, err := s.sizes()
	if err != nil || compactedSize(inUse) >= size {
		return false, err
	}
	return true, s.Compact()
}

// batchEntries returns the entries of the Puts of batch, in order.
func batchEntries(batch []op) []Entry {
	var out []Entry
	for _, o := range batch {
		out = append(out, o.entries...)
	}
	return out
}

// entriesBytes is about what entries take in the table.
func entriesBytes(entries []Entry) int64 {
	var n int64
	for _, e := range entries {
		n += int64(len(e.Shaped)+len(e.Original)+len(e.Conversation)) + 2*ekeyLen
	}
	return n
}

// batchConversations names the conversations a batch writes to.
func batchConversations(batch []op, turns map[string]int) map[string]bool {
	keep := make(map[string]bool, len(batch)+len(turns))
	for _, o := range batch {
		if o.begin {
			keep[o.conv] = true
		}
		for _, e := range o.entries {
			keep[e.Conversation] = true
		}
	}
	for c := range turns {
		keep[c] = true
	}
	return keep
}
