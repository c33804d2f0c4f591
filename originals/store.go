package originals

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/shaperproxy/shaperproxy/internal/boltdb"
)

// FileName is the name of the table inside the data directory.
const FileName = "originals.db"

// Defaults for Options.
const (
	DefaultTTL         = 24 * time.Hour
	DefaultMaxBytes    = 8 << 20
	DefaultLockTimeout = boltdb.DefaultLockTimeout
	// MaxConversationLen is the longest conversation key Put and BeginTurn accept.
	MaxConversationLen = 1024
)

// Errors returned by the Store. Errors from bbolt and the file system are
// wrapped with %w.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("originals: store is closed")
	// ErrReadOnly is returned by writing methods of a Store opened ReadOnly.
	ErrReadOnly = errors.New("originals: store is read-only")
	// ErrLocked is returned by Open when another process holds the table
	// for writing (bbolt allows one writer and, while it is open, no readers
	// in other processes) and LockTimeout passed.
	ErrLocked = errors.New("originals: table is locked by another process")
	// ErrInvalid is returned for an entry or conversation the table cannot
	// hold: an empty or over-long conversation key, a negative turn.
	ErrInvalid = errors.New("originals: invalid entry")
	// ErrCorrupt is returned when a record cannot be decoded.
	ErrCorrupt = errors.New("originals: corrupt record")
)

// Options configure a Store. The zero value works.
type Options struct {
	// TTL is how long a conversation may go without a Put or BeginTurn
	// before Purge removes it. Zero means DefaultTTL.
	TTL time.Duration
	// MaxBytes bounds the file written through a Writer: it never grows
	// past MaxBytes. No write at all grows it past its size plus a quarter
	// of the space free on its file system (the disk share), so the table
	// never takes the whole disk. New entries get half of the limit (bbolt
	// grows a file in steps, powers of two up to 16 MiB, and copies every
	// page a transaction changes, so clearing turns and making room need
	// pages of their own). When a Writer's entries do not fit, the
	// conversations idle longest are removed to make room
	// (Writer.Evicted), then the entries are refused (Writer.Refused). A
	// file above MaxBytes (made with a larger bound) is not grown and is
	// compacted by Maintain and the Writer when at least half of it is
	// reclaimable. Zero means DefaultMaxBytes; a negative value means no
	// size bound (the disk share still holds) and no automatic compaction.
	MaxBytes int64
	// Now returns the current time. Nil means time.Now.
	Now func() time.Time
	// ReadOnly opens an existing table for reading, with a shared lock: it
	// fails (ErrLocked) while a writing process has the table open.
	ReadOnly bool
	// LockTimeout is how long Open waits for the file lock. Zero means
	// DefaultLockTimeout.
	LockTimeout time.Duration
	// OnError receives every error from background work (Writer,
	// Maintain). Nil drops them; the Writer still counts the entries it
	// lost.
	OnError func(error)
	// Logger receives a warning, at most once per ReportEvery, when
	// entries were not recorded (a full queue, a full table, write errors)
	// or conversations were removed to make room, with the counts since
	// the previous warning and the last error. Nil logs nothing.
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if o.OnError == nil {
		o.OnError = func(error) {}
	}
	return o
}

// Entry is one original reasoning text and the shaped text that replaced it.
type Entry struct {
	Shaped       string    // the shaped text; the table is keyed by sha256(Shaped)
	Original     string    // the reasoning before shaping
	Conversation string    // the conversation key; must not be empty
	Turn         int       // the turn the entry was recorded in; >= 0
	Time         time.Time // when it was recorded; zero means now at Put
}

// Stats describe the table.
type Stats struct {
	Entries       int   `json:"entries"`
	Bytes         int64 `json:"bytes"` // bytes of original text
	Conversations int   `json:"conversations"`
	FanOuts       int   `json:"fan_outs"` // shaped texts with more than one distinct original
	MaxFanOut     int   `json:"max_fan_out"`
	FileSize      int64 `json:"file_size"`
}

// Store is the side table of original reasoning: one bbolt file holding,
// per conversation, the originals recorded in its current turn. It is safe
// for concurrent use. Writing methods commit (and fsync) before they return;
// use Async to keep them off a request path. Close releases the file.
type Store struct {
	opts   Options
	db     *boltdb.DB
	losses *lossLog
}

// Open opens the table at path, creating it (mode 0600, directory 0700)
// unless opts.ReadOnly.
func Open(path string, opts Options) (*Store, error) {
	opts = opts.withDefaults()
	db, err := boltdb.Open(path, boltdb.Options{ReadOnly: opts.ReadOnly, LockTimeout: opts.LockTimeout})
	if errors.Is(err, boltdb.ErrLocked) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("originals: %w", err)
	}
	s := &Store{opts: opts, db: db, losses: newLossLog(opts.Logger)}
	if opts.ReadOnly {
		return s, nil
	}
	if err := s.createBuckets(); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// createBuckets creates the top-level buckets.
func (s *Store) createBuckets() error {
	return s.update(func(tx *bolt.Tx) error {
		for _, name := range [][]byte{bucketConv, bucketHash} {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return fmt.Errorf("originals: create bucket: %w", err)
			}
		}
		return nil
	})
}

// Path returns the file the Store was opened on.
func (s *Store) Path() string { return s.db.Path() }

// Close releases the file. Methods called after Close return ErrClosed.
// Close a Writer made by Async before closing its Store.
func (s *Store) Close() error { return ownErr(s.db.Close()) }

func (s *Store) view(fn func(*bolt.Tx) error) error { return ownErr(s.db.View(fn)) }

// update runs fn in a write transaction that only deletes or creates
// buckets: it may use the whole fileLimit, or the file as it is when that
// is larger (see limits).
func (s *Store) update(fn func(*bolt.Tx) error) error {
	_, deletion := s.limits(true)
	return s.updateLimit(deletion, fn)
}

// ownErr gives boltdb's ErrClosed this package's name.
func ownErr(err error) error {
	if errors.Is(err, boltdb.ErrClosed) {
		return ErrClosed
	}
	return err
}

// Put records the originals of one request in one transaction. Several
// originals may shape to the same text: all are kept. A (shaped, original)
// pair already recorded for the conversation is not recorded again; if it
// comes back in a later turn it moves to that turn. Entries of a turn before
// the conversation's current turn (the last BeginTurn) are ignored: they
// would be cleared anyway.
//
// Put is the synchronous primitive (tools, benchmarks): it is held to the
// disk share (see Options.MaxBytes) and returns ErrFull past it, but it
// neither applies MaxBytes nor removes other conversations to make room.
// The Writer, which the proxy writes through, keeps the table within
// MaxBytes.
func (s *Store) Put(entries []Entry) error {
	if err := validateEntries(entries); err != nil {
		return err
	}
	file, _ := s.limits(false)
	err := s.updateLimit(putLimit(file), func(tx *bolt.Tx) error { return putTx(tx, entries, s.opts.Now()) })
	if full(err) {
		return ErrFull
	}
	return err
}

func validateEntries(entries []Entry) error {
	for _, e := range entries {
		if err := validate(e.Conversation, e.Turn); err != nil {
			return err
		}
	}
	return nil
}

func validate(conv string, turn int) error {
	switch {
	case conv == "":
		return fmt.Errorf("%w: empty conversation key", ErrInvalid)
	case len(conv) > MaxConversationLen:
		return fmt.Errorf("%w: conversation key of %d bytes (max %d)", ErrInvalid, len(conv), MaxConversationLen)
	case turn < 0:
		return fmt.Errorf("%w: negative turn %d", ErrInvalid, turn)
	}
	return nil
}

func putTx(tx *bolt.Tx, entries []Entry, now time.Time) error {
	for _, e := range entries {
		if err := putOne(tx, e, now); err != nil {
			return err
		}
	}
	return nil
}

func putOne(tx *bolt.Tx, e Entry, now time.Time) error {
	cb, eb, err := convBuckets(tx, e.Conversation)
	if err != nil {
		return err
	}
	m := decodeMeta(cb.Get(keyMeta))
	stale := e.Turn < m.turn
	m.seen = now
	if err := cb.Put(keyMeta, m.encode()); err != nil || stale {
		return err
	}
	hb := tx.Bucket(bucketHash)
	hs, ho := hashOf(e.Shaped), hashOf(e.Original)
	ikey := indexKey(hs, ho, e.Conversation)
	if v := hb.Get(ikey); v != nil {
		_, _, old, _, err := indexFields(ikey, v)
		if err != nil || old >= e.Turn {
			return err
		}
		if err := eb.Delete(entryKey(old, hs, ho)); err != nil {
			return err
		}
	}
	if e.Time.IsZero() {
		e.Time = now
	}
	if err := eb.Put(entryKey(e.Turn, hs, ho), encodeValue(e.Time, e.Shaped, e.Original)); err != nil {
		return err
	}
	return hb.Put(ikey, indexValue(e.Turn, len(e.Original)))
}

// convBuckets returns the bucket of conv and its entries bucket, creating them.
func convBuckets(tx *bolt.Tx, conv string) (cb, eb *bolt.Bucket, err error) {
	cb, err = tx.Bucket(bucketConv).CreateBucketIfNotExists([]byte(conv))
	if err != nil {
		return nil, nil, err
	}
	eb, err = cb.CreateBucketIfNotExists(bucketEntries)
	return cb, eb, err
}

// BeginTurn marks the start of turn in conv: the conversation's entries of
// earlier turns are deleted, other conversations are not touched, and the
// conversation's last-seen time is now.
func (s *Store) BeginTurn(conv string, turn int) error {
	if err := validate(conv, turn); err != nil {
		return err
	}
	return s.update(func(tx *bolt.Tx) error {
		return beginTurnTx(tx, conv, turn, s.opts.Now())
	})
}

func beginTurnTx(tx *bolt.Tx, conv string, turn int, now time.Time) error {
	cb, eb, err := convBuckets(tx, conv)
	if err != nil {
		return err
	}
	if err := cb.Put(keyMeta, meta{seen: now, turn: turn}.encode()); err != nil {
		return err
	}
	var old [][]byte
	c := eb.Cursor()
	for k, _ := c.First(); k != nil && keyTurn(k) < turn; k, _ = c.Next() {
		old = append(old, bytes.Clone(k))
	}
	return deleteEntries(tx.Bucket(bucketHash), eb, conv, old)
}

func deleteEntries(hb, eb *bolt.Bucket, conv string, keys [][]byte) error {
	for _, k := range keys {
		if err := eb.Delete(k); err != nil {
			return err
		}
		if err := hb.Delete(indexKeyOf(k, conv)); err != nil {
			return err
		}
	}
	return nil
}

// Sum returns the key of a shaped text: its sha256.
func Sum(shaped string) [32]byte { return hashOf(shaped) }

// Lookup returns the entries whose shaped text is shaped, grouped by
// original. It returns no entries and no error on a miss.
func (s *Store) Lookup(shaped string) ([]Entry, error) {
	return s.LookupHash(hashOf(shaped))
}

// LookupHash is Lookup by sha256 of the shaped text.
func (s *Store) LookupHash(shaped [32]byte) ([]Entry, error) {
	var out []Entry
	err := s.view(func(tx *bolt.Tx) error {
		hb, root := tx.Bucket(bucketHash), tx.Bucket(bucketConv)
		if hb == nil || root == nil {
			return nil
		}
		c := hb.Cursor()
		for k, v := c.Seek(shaped[:]); k != nil && bytes.HasPrefix(k, shaped[:]); k, v = c.Next() {
			e, err := lookupOne(root, shaped, k, v)
			if err != nil {
				return err
			}
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

func lookupOne(root *bolt.Bucket, shaped sum, k, v []byte) (Entry, error) {
	original, conv, turn, _, err := indexFields(k, v)
	if err != nil {
		return Entry{}, err
	}
	ekey := entryKey(turn, shaped, original)
	var val []byte
	if cb := root.Bucket([]byte(conv)); cb != nil {
		if eb := cb.Bucket(bucketEntries); eb != nil {
			val = eb.Get(ekey)
		}
	}
	if val == nil {
		return Entry{}, fmt.Errorf("%w: index names a missing entry (conversation %q, turn %d)", ErrCorrupt, conv, turn)
	}
	return decodeEntry(conv, ekey, val)
}

// List returns the entries of conv, or of every conversation if conv is
// empty, ordered by conversation, turn and hash.
func (s *Store) List(conv string) ([]Entry, error) {
	var out []Entry
	err := s.view(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketConv)
		if root == nil {
			return nil
		}
		if conv != "" {
			return listConv(root, []byte(conv), &out)
		}
		return root.ForEachBucket(func(name []byte) error {
			return listConv(root, name, &out)
		})
	})
	return out, err
}

func listConv(root *bolt.Bucket, name []byte, out *[]Entry) error {
	cb := root.Bucket(name)
	if cb == nil {
		return nil
	}
	eb := cb.Bucket(bucketEntries)
	if eb == nil {
		return nil
	}
	conv := string(name)
	return eb.ForEach(func(k, v []byte) error {
		e, err := decodeEntry(conv, k, v)
		*out = append(*out, e)
		return err
	})
}

// Stats counts the table's entries from its index.
func (s *Store) Stats() (Stats, error) {
	var st Stats
	err := s.view(func(tx *bolt.Tx) error {
		if root := tx.Bucket(bucketConv); root != nil {
			_ = root.ForEachBucket(func([]byte) error { st.Conversations++; return nil })
		}
		if hb := tx.Bucket(bucketHash); hb != nil {
			return countIndex(hb, &st)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	fi, err := os.Stat(s.Path())
	if err != nil {
		return st, fmt.Errorf("originals: %w", err)
	}
	st.FileSize = fi.Size()
	return st, nil
}

// countIndex walks the index, which is sorted by shaped hash then original
// hash, counting distinct originals per shaped text.
func countIndex(hb *bolt.Bucket, st *Stats) error {
	var prevShaped, prevOriginal []byte
	fan := 0
	flush := func() {
		if fan > 1 {
			st.FanOuts++
		}
		st.MaxFanOut = max(st.MaxFanOut, fan)
	}
	err := hb.ForEach(func(k, v []byte) error {
		_, _, _, n, err := indexFields(k, v)
		if err != nil {
			return err
		}
		st.Entries++
		st.Bytes += n
		switch {
		case !bytes.Equal(k[:sumLen], prevShaped):
			flush()
			fan = 1
		case !bytes.Equal(k[sumLen:2*sumLen], prevOriginal):
			fan++
		}
		prevShaped, prevOriginal = k[:sumLen], k[sumLen:2*sumLen]
		return nil
	})
	flush()
	return err
}

// Purge removes the conversations that have had no Put or BeginTurn for
// longer than the TTL before now, and returns how many it removed.
func (s *Store) Purge(now time.Time) (int, error) {
	n := 0
	err := s.update(func(tx *bolt.Tx) error {
		root := tx.Bucket(bucketConv)
		var idle [][]byte
		err := root.ForEachBucket(func(name []byte) error {
			if now.Sub(decodeMeta(root.Bucket(name).Get(keyMeta)).seen) > s.opts.TTL {
				idle = append(idle, bytes.Clone(name))
			}
			return nil
		})
		for _, name := range idle {
			if err := removeConv(tx, name); err != nil {
				return err
			}
			n++
		}
		return err
	})
	return n, err
}

func removeConv(tx *bolt.Tx, name []byte) error {
	root := tx.Bucket(bucketConv)
	if eb := root.Bucket(name).Bucket(bucketEntries); eb != nil {
		var keys [][]byte
		_ = eb.ForEach(func(k, _ []byte) error { keys = append(keys, bytes.Clone(k)); return nil })
		if err := deleteEntries(tx.Bucket(bucketHash), eb, string(name), keys); err != nil {
			return err
		}
	}
	return root.DeleteBucket(name)
}

// Check verifies the file with bbolt's consistency check, and that every
// entry has its index record and every index record its entry.
func (s *Store) Check() error {
	return s.view(func(tx *bolt.Tx) error {
		if err := boltdb.Check(tx); err != nil {
			return fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return checkIndex(tx)
	})
}

func checkIndex(tx *bolt.Tx) error {
	root, hb := tx.Bucket(bucketConv), tx.Bucket(bucketHash)
	if root == nil || hb == nil {
		return nil
	}
	entries := 0
	err := root.ForEachBucket(func(name []byte) error {
		eb := root.Bucket(name).Bucket(bucketEntries)
		if eb == nil {
			return nil
		}
		return eb.ForEach(func(k, v []byte) error {
			entries++
			return checkEntry(hb, string(name), k, v)
		})
	})
	if err != nil {
		return err
	}
	if n := hb.Stats().KeyN; n != entries {
		return fmt.Errorf("%w: %d index records for %d entries", ErrCorrupt, n, entries)
	}
	return nil
}

func checkEntry(hb *bolt.Bucket, conv string, k, v []byte) error {
	e, err := decodeEntry(conv, k, v)
	if err != nil {
		return err
	}
	if !bytes.Equal(k, entryKey(e.Turn, hashOf(e.Shaped), hashOf(e.Original))) {
		return fmt.Errorf("%w: entry key does not match its texts (conversation %q)", ErrCorrupt, conv)
	}
	iv := hb.Get(indexKeyOf(k, conv))
	if len(iv) != ivalLen || keyTurn(iv) != e.Turn {
		return fmt.Errorf("%w: entry without its index record (conversation %q, turn %d)", ErrCorrupt, conv, e.Turn)
	}
	return nil
}
