package ledger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/shaperproxy/shaperproxy/internal/boltdb"
)

// FileName is the name of the ledger inside the data directory.
const FileName = "state.db"

// Defaults and limits.
const (
	defaultTTL         = 7 * 24 * time.Hour
	defaultLockTimeout = boltdb.DefaultLockTimeout
	// maxConversationLen is the longest conversation key the Store accepts.
	maxConversationLen = 1024
	// maxKeyLen is the longest bucket name, key or turn key it accepts.
	maxKeyLen = 1024
	// TouchEvery is how stale a conversation's last-seen time must be for
	// Touch to write it again.
	TouchEvery = time.Hour
)

// Errors returned by the Store. Errors from bbolt and the file system are
// wrapped with %w.
var (
	// errClosed is returned by every method after Close.
	errClosed = errors.New("ledger: store is closed")
	// errLocked is returned by Open when another process holds the file
	// and LockTimeout passed.
	errLocked = errors.New("ledger: file is locked by another process")
	// errInvalid is returned for an empty or over-long conversation,
	// bucket, key or turn key.
	errInvalid = errors.New("ledger: invalid argument")
	// errCorrupt is returned when a stored record cannot be decoded.
	errCorrupt = errors.New("ledger: corrupt record")
)

// Options configure a Store. The zero value works.
type Options struct {
	// TTL is how long a conversation may go unseen (no write, no Touch)
	// before Purge removes it. Zero means DefaultTTL.
	TTL time.Duration
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// LockTimeout is how long Open waits for the file lock. Zero means
	// DefaultLockTimeout.
	LockTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = defaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = defaultLockTimeout
	}
	return o
}

// Insertion is what the proxy inserted into one turn's history: three raw
// messages keyed by the sha256 of the merged content the client saw. It
// has the fields of review.Insertion, so each converts to the other
// (review.Insertion(ins)); the two packages do not import each other.
type Insertion struct {
	Key          [32]byte
	Draft        []byte
	Notice       []byte
	Continuation []byte
}

// Store is the ledger: one bbolt file holding, per conversation, the
// proxy's insertions, the turns already reviewed (checkpoints), small
// named values, and the conversation's last-seen time. It is safe for
// concurrent use. Every write commits (and fsyncs) before it returns,
// but PutLater's, which a background writer commits (see PutLater). Close
// writes what PutLater queued and releases the file.
type Store struct {
	opts Options
	db   *boltdb.DB
	kv   kvState
}

// Bucket and key names of the file layout:
//
//	conv/<conversation>/seen          last-seen time (unix ns, 8 bytes)
//	conv/<conversation>/ins/<sha256>  an Insertion
//	conv/<conversation>/turns/<turn>  a checkpoint (the time of its mark)
//	conv/<conversation>/kv/<bucket>/<key>  a value of Put
var (
	bucketConv  = []byte("conv")
	bucketIns   = []byte("ins")
	bucketTurns = []byte("turns")
	bucketKV    = []byte("kv")
	keySeen     = []byte("seen")
)

// Open opens the ledger at path, creating it (mode 0600, its directory
// 0700). A file another process has open fails with ErrLocked after
// LockTimeout.
func Open(path string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	db, err := boltdb.Open(path, boltdb.Options{LockTimeout: opts.LockTimeout})
	if errors.Is(err, boltdb.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", errLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	s := &Store{opts: opts, db: db}
	err = s.update(func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(bucketConv)
		return err
	})
	if err != nil {
		db.Close()
		return nil, err
	}
	s.kv.init()
	go s.writer()
	return s, nil
}

// Path returns the file the Store was opened on.
func (s *Store) Path() string { return s.db.Path() }

// Close writes the values PutLater queued, stops its writer and releases
// the file. Methods called after Close return ErrClosed.
func (s *Store) Close() error {
	k := &s.kv
	k.mu.Lock()
	if !k.closed {
		k.closed = true
		close(k.wake)
		close(k.stop)
	}
	k.cond.Broadcast()
	k.mu.Unlock()
	<-k.done
	return ownErr(s.db.Close())
}

func (s *Store) view(fn func(*bolt.Tx) error) error { return ownErr(s.db.View(fn)) }

func (s *Store) update(fn func(*bolt.Tx) error) error { return ownErr(s.db.Update(fn)) }

// ownErr gives boltdb's ErrClosed this package's name.
func ownErr(err error) error {
	if errors.Is(err, boltdb.ErrClosed) {
		return errClosed
	}
	return err
}

// updateConv runs fn on conversation's bucket (created if needed) in a
// write transaction and sets its last-seen time to now.
func (s *Store) updateConv(conversation string, fn func(cb *bolt.Bucket) error) error {
	if err := checkName("conversation", conversation, maxConversationLen); err != nil {
		return err
	}
	now := s.opts.Now()
	return s.update(func(tx *bolt.Tx) error {
		cb, err := tx.Bucket(bucketConv).CreateBucketIfNotExists([]byte(conversation))
		if err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		if err := cb.Put(keySeen, encodeTime(now)); err != nil {
			return fmt.Errorf("ledger: %w", err)
		}
		return fn(cb)
	})
}

// viewConv runs fn on conversation's bucket in a read transaction; cb is
// nil when the conversation has none.
func (s *Store) viewConv(conversation string, fn func(cb *bolt.Bucket) error) error {
	if err := checkName("conversation", conversation, maxConversationLen); err != nil {
		return err
	}
	return s.view(func(tx *bolt.Tx) error {
		return fn(tx.Bucket(bucketConv).Bucket([]byte(conversation)))
	})
}

// checkName rejects an empty or over-long name.
func checkName(what, name string, limit int) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty %s", errInvalid, what)
	case len(name) > limit:
		return fmt.Errorf("%w: %s of %d bytes (max %d)", errInvalid, what, len(name), limit)
	}
	return nil
}

// sub returns the child bucket name of b, creating it when create is set
// (b and the result may be nil otherwise).
func sub(b *bolt.Bucket, name []byte, create bool) (*bolt.Bucket, error) {
	if b == nil {
		return nil, nil
	}
	if !create {
		return b.Bucket(name), nil
	}
	c, err := b.CreateBucketIfNotExists(name)
	if err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return c, nil
}

// PutInsertion records ins for conversation, replacing one with the same
// key.
func (s *Store) PutInsertion(conversation string, ins Insertion) error {
	v := encodeInsertion(ins)
	return s.updateConv(conversation, func(cb *bolt.Bucket) error {
		ib, err := sub(cb, bucketIns, true)
		if err != nil {
			return err
		}
		return ib.Put(ins.Key[:], v)
	})
}

// Insertion returns the insertion of conversation recorded under key.
// ok is false on a miss.
func (s *Store) Insertion(conversation string, key [32]byte) (ins Insertion, ok bool, err error) {
	err = s.viewConv(conversation, func(cb *bolt.Bucket) error {
		ib, _ := sub(cb, bucketIns, false)
		if ib == nil {
			return nil
		}
		v := ib.Get(key[:])
		if v == nil {
			return nil
		}
		ok = true
		ins, err = decodeInsertion(key, v)
		return err
	})
	return ins, ok && err == nil, err
}

// MarkReviewed records the checkpoint of a turn: it returns true when this
// call made the mark, false when the turn was marked before (by this
// process or an earlier one: the mark is on disk when it returns). Exactly
// one of concurrent calls for the same turn gets true.
func (s *Store) MarkReviewed(conversation, turnKey string) (first bool, err error) {
	if err := checkName("turn key", turnKey, maxKeyLen); err != nil {
		return false, err
	}
	err = s.updateConv(conversation, func(cb *bolt.Bucket) error {
		tb, err := sub(cb, bucketTurns, true)
		if err != nil || tb.Get([]byte(turnKey)) != nil {
			return err
		}
		first = true
		return tb.Put([]byte(turnKey), encodeTime(s.opts.Now()))
	})
	return first && err == nil, err
}

// Reviewed reports whether the turn has been marked.
func (s *Store) Reviewed(conversation, turnKey string) (bool, error) {
	if err := checkName("turn key", turnKey, maxKeyLen); err != nil {
		return false, err
	}
	found := false
	err := s.viewConv(conversation, func(cb *bolt.Bucket) error {
		tb, _ := sub(cb, bucketTurns, false)
		found = tb != nil && tb.Get([]byte(turnKey)) != nil
		return nil
	})
	return found, err
}

// Put stores a small value under bucket and key for conversation (state
// of other features, such as a guard's acknowledgements). value may be
// empty.
func (s *Store) Put(bucket, conversation, key string, value []byte) error {
	if err := checkKV(bucket, key); err != nil {
		return err
	}
	id, k := kvID{bucket, conversation, key}, &s.kv
	k.writeMu.Lock() // after any batch holding an older value of the key
	defer k.writeMu.Unlock()
	k.mu.Lock()
	k.unqueue(id) // this value replaces it
	k.mu.Unlock()
	err := s.updateConv(conversation, func(cb *bolt.Bucket) error {
		kv, err := sub(cb, bucketKV, true)
		if err == nil {
			kv, err = sub(kv, []byte(bucket), true)
		}
		if err != nil {
			return err
		}
		if value == nil {
			value = []byte{}
		}
		return kv.Put([]byte(key), value)
	})
	k.mu.Lock()
	switch _, newer := k.pending[id]; {
	case newer: // a PutLater came meanwhile: its value is the key's
	case err == nil:
		k.remember(id, kvEntry{value: cloneValue(value), ok: true})
	default:
		k.forget(id)
	}
	k.mu.Unlock()
	return err
}

// Get returns a copy of the value Put or PutLater stored, and whether
// there is one. After the first read of a value it comes from memory.
func (s *Store) Get(bucket, conversation, key string) (value []byte, ok bool, err error) {
	if err := checkKV(bucket, key); err != nil {
		return nil, false, err
	}
	id := kvID{bucket, conversation, key}
	e, hit, gen := s.kv.cached(id)
	if hit {
		if !e.ok {
			return nil, false, nil
		}
		return cloneValue(e.value), true, nil
	}
	err = s.viewConv(conversation, func(cb *bolt.Bucket) error {
		kv, _ := sub(cb, bucketKV, false)
		kv, _ = sub(kv, []byte(bucket), false)
		if kv == nil {
			return nil
		}
		if v := kv.Get([]byte(key)); v != nil {
			value, ok = cloneValue(v), true
		}
		return nil
	})
	if err == nil {
		s.kv.learn(id, kvEntry{value: cloneValue(value), ok: ok}, gen)
	}
	return value, ok, err
}

// Delete removes the value under bucket and key; a missing one is not an
// error.
func (s *Store) Delete(bucket, conversation, key string) error {
	if err := checkKV(bucket, key); err != nil {
		return err
	}
	id, k := kvID{bucket, conversation, key}, &s.kv
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	k.mu.Lock()
	k.forget(id) // a queued value of the key is deleted too
	k.mu.Unlock()
	err := s.updateConv(conversation, func(cb *bolt.Bucket) error {
		kv, _ := sub(cb, bucketKV, false)
		kv, _ = sub(kv, []byte(bucket), false)
		if kv == nil {
			return nil
		}
		return kv.Delete([]byte(key))
	})
	if err == nil {
		k.mu.Lock()
		k.remember(id, kvEntry{})
		k.mu.Unlock()
	}
	return err
}

func checkKV(bucket, key string) error {
	if err := checkName("bucket", bucket, maxKeyLen); err != nil {
		return err
	}
	return checkName("key", key, maxKeyLen)
}

// Touch sets the conversation's last-seen time to now, so Purge keeps a
// conversation that is used but not written to. It writes only when the
// recorded time is older than TouchEvery (or missing): most calls are a
// read. A conversation with no record is not created.
func (s *Store) Touch(conversation string) error {
	now := s.opts.Now()
	stale := false
	err := s.viewConv(conversation, func(cb *bolt.Bucket) error {
		stale = cb != nil && now.Sub(decodeTime(cb.Get(keySeen))) > TouchEvery
		return nil
	})
	if err != nil || !stale {
		return err
	}
	return s.updateConv(conversation, func(*bolt.Bucket) error { return nil })
}

// LastSeen returns the conversation's last-seen time, and false when the
// ledger holds nothing for it.
func (s *Store) LastSeen(conversation string) (time.Time, bool, error) {
	var t time.Time
	found := false
	err := s.viewConv(conversation, func(cb *bolt.Bucket) error {
		if cb != nil {
			t, found = decodeTime(cb.Get(keySeen)), true
		}
		return nil
	})
	return t, found, err
}

// ClearConversation removes everything the ledger holds for conversation.
func (s *Store) ClearConversation(conversation string) error {
	if err := checkName("conversation", conversation, maxConversationLen); err != nil {
		return err
	}
	k := &s.kv
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	k.mu.Lock()
	k.forgetConversations(map[string]bool{conversation: true}, false)
	k.mu.Unlock()
	return s.update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketConv)
		if root.Bucket([]byte(conversation)) == nil {
			return nil
		}
		return root.DeleteBucket([]byte(conversation))
	})
}

// Purge removes the conversations not seen for longer than the TTL
// before now, and returns how many it removed. Run it now and then (every
// few minutes); bbolt reuses the freed pages.
func (s *Store) Purge(now time.Time) (int, error) {
	n := 0
	k := &s.kv
	k.writeMu.Lock()
	defer k.writeMu.Unlock()
	var idle [][]byte
	err := s.update(func(tx *bolt.Tx) error {
		n = 0
		root := tx.Bucket(bucketConv)
		idle = idle[:0]
		err := root.ForEachBucket(func(name []byte) error {
			if now.Sub(decodeTime(root.Bucket(name).Get(keySeen))) > s.opts.TTL {
				idle = append(idle, bytes.Clone(name))
			}
			return nil
		})
		for _, name := range idle {
			if err := root.DeleteBucket(name); err != nil {
				return err
			}
			n++
		}
		return err
	})
	if err == nil {
		names := make(map[string]bool, len(idle))
		for _, name := range idle {
			names[string(name)] = true
		}
		k.mu.Lock()
		k.forgetConversations(names, true)
		k.mu.Unlock()
	}
	return n, err
}

// Check runs bbolt's consistency check and decodes every insertion.
func (s *Store) Check() error {
	return s.view(func(tx *bolt.Tx) error {
		var errs []error
		if err := boltdb.Check(tx); err != nil {
			errs = append(errs, err)
		}
		root := tx.Bucket(bucketConv)
		_ = root.ForEachBucket(func(name []byte) error {
			ib := root.Bucket(name).Bucket(bucketIns)
			if ib == nil {
				return nil
			}
			return ib.ForEach(func(k, v []byte) error {
				if len(k) != 32 {
					errs = append(errs, fmt.Errorf("%w: insertion key of %d bytes in %q", errCorrupt, len(k), name))
				} else if _, err := decodeInsertion([32]byte(k), v); err != nil {
					errs = append(errs, fmt.Errorf("insertion in %q: %w", name, err))
				}
				return nil
			})
		})
		if len(errs) > 0 {
			return fmt.Errorf("%w: %w", errCorrupt, errors.Join(errs...))
		}
		return nil
	})
}

func encodeTime(t time.Time) []byte {
	return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano()))
}

// decodeTime decodes a last-seen time; a missing or short value is the
// zero time, so Purge removes it.
func decodeTime(v []byte) time.Time {
	if len(v) != 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(v)))
}
