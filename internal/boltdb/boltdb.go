package boltdb

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"
)

// DefaultLockTimeout is how long Open waits for the file lock when
// Options.LockTimeout is zero.
const DefaultLockTimeout = 2 * time.Second

// Errors returned by a DB. Errors from bbolt and the file system are
// wrapped with %w.
var (
	// ErrClosed is returned by every method after Close.
	ErrClosed = errors.New("boltdb: database is closed")
	// ErrLocked is returned by Open when another process holds the file
	// (bbolt allows one writer and, while it is open, no readers in other
	// processes) and LockTimeout passed.
	ErrLocked = errors.New("boltdb: file is locked by another process")
	// errReadOnly is returned by Update and Compact on a DB opened ReadOnly.
	errReadOnly = errors.New("boltdb: database is read-only")
)

// Options configure Open. The zero value opens the file for writing,
// creating it.
type Options struct {
	// ReadOnly opens an existing file for reading, with a shared lock: it
	// fails (ErrLocked) while a writing process has the file open, and
	// with an error matching fs.ErrNotExist when there is no file.
	ReadOnly bool
	// LockTimeout is how long Open waits for the file lock. Zero or less
	// means DefaultLockTimeout.
	LockTimeout time.Duration
}

// DB is one bbolt file. It is safe for concurrent use. Close releases the
// file; every method called after Close returns ErrClosed.
type DB struct {
	path string
	opts Options

	mu sync.RWMutex // write-locked only by Compact and Close, which replace db
	db *bolt.DB
}

// Open opens the file at path. Unless o.ReadOnly it creates the file (mode
// 0600) and its directory (0700), tightens the mode of a file that others
// may read, and removes what an interrupted Compact left behind.
func Open(path string, o Options) (*DB, error) {
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultLockTimeout
	}
	if !o.ReadOnly {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, err
		}
		_ = os.Remove(path + CompactSuffix) // the file itself is intact
	}
	db, err := open(path, o)
	if err != nil {
		return nil, err
	}
	if !o.ReadOnly {
		if err := tighten(path); err != nil {
			db.Close()
			return nil, err
		}
	}
	return &DB{path: path, opts: o, db: db}, nil
}

// open opens path with bbolt, turning a lock timeout into ErrLocked.
func open(path string, o Options) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout:      o.LockTimeout,
		ReadOnly:     o.ReadOnly,
		FreelistType: bolt.FreelistMapType,
	})
	if errors.Is(err, bolterrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// tighten sets the mode of a file created by someone else to 0600.
func tighten(path string) error {
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	return os.Chmod(path, 0o600)
}

// Path returns the file the DB was opened on.
func (d *DB) Path() string { return d.path }

// Close releases the file. It returns ErrClosed when called again.
func (d *DB) Close() error {
	return d.locked(&d.mu, false, func(db *bolt.DB) error {
		d.db = nil
		return db.Close()
	})
}

// View runs fn in a read transaction, as bbolt's DB.View.
func (d *DB) View(fn func(*bolt.Tx) error) error {
	return d.locked(d.mu.RLocker(), false, func(db *bolt.DB) error { return db.View(fn) })
}

// Update runs fn in a write transaction, as bbolt's DB.Update: it commits
// (and fsyncs) only when fn returns nil.
func (d *DB) Update(fn func(*bolt.Tx) error) error {
	return d.locked(d.mu.RLocker(), true, func(db *bolt.DB) error { return db.Update(fn) })
}

// locked runs fn on the open database with l held. A writing fn (write)
// on a DB opened ReadOnly is refused with ErrReadOnly.
func (d *DB) locked(l sync.Locker, write bool, fn func(*bolt.DB) error) error {
	if write && d.opts.ReadOnly {
		return errReadOnly
	}
	l.Lock()
	defer l.Unlock()
	if d.db == nil {
		return ErrClosed
	}
	return fn(d.db)
}

// Check runs bbolt's consistency check on tx and joins what it finds; nil
// means the file is consistent.
func Check(tx *bolt.Tx) error {
	var errs []error
	for err := range tx.Check() {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
