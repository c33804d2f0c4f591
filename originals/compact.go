package originals

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/shaperproxy/shaperproxy/internal/boltdb"
)

// DefaultMaintainEvery is Maintain's interval when none is given.
const DefaultMaintainEvery = 10 * time.Minute

// compactTxSize bounds the size of each transaction of a compaction.
const compactTxSize = 4 << 20

// Compact rewrites the table into a fresh file and renames it over the old
// one: bbolt reuses freed pages but never shrinks its file.
//
// The contract: Compact blocks every other method of the Store while it runs
// (milliseconds for a table of a few MB; a Writer absorbs the wait). The new
// file is written next to the table (path + ".compact"), committed and
// synced, then renamed over the table while it is open and locked, so no
// other process can take the table in between. On any error before the
// rename the Store goes on with the old file and the temporary file is
// removed; a crash leaves the old file intact and the temporary file is
// removed by the next Open. A process that opened the old file before the
// rename keeps reading the old (unchanged) data. Renaming an open file is
// POSIX behaviour: Compact is not supported on Windows.
func (s *Store) Compact() error {
	if s.opts.ReadOnly {
		return ErrReadOnly
	}
	switch err := s.db.Compact(compactTxSize); {
	case err == nil:
		return nil
	case errors.Is(err, boltdb.ErrClosed):
		return ErrClosed
	default:
		return fmt.Errorf("originals: compact: %w", err)
	}
}

// sizes returns the size of the file and the bytes of pages in use.
func (s *Store) sizes() (size, inUse int64, err error) {
	fi, err := os.Stat(s.Path())
	if err != nil {
		return 0, 0, err
	}
	err = s.view(func(tx *bolt.Tx) error {
		inUse = tx.Size() - int64(tx.DB().Stats().FreeAlloc)
		return nil
	})
	return fi.Size(), inUse, err
}

// compactedSize estimates the size of a compacted copy of inUse bytes of
// pages: bbolt sizes a file of up to 16 MB to a power of two (32 KB at
// least) and grows a larger one in 16 MB steps.
func compactedSize(inUse int64) int64 {
	if inUse > 16<<20 {
		return inUse + 16<<20
	}
	n := int64(32 << 10)
	for n < inUse {
		n *= 2
	}
	return n
}

// compactIfLarge compacts when the file is larger than MaxBytes and a
// compaction would at least halve it (so a table whose live data is large
// is not rewritten over and over). It reports whether it compacted.
func (s *Store) compactIfLarge() (bool, error) {
	if s.opts.MaxBytes < 0 || s.opts.ReadOnly {
		return false, nil
	}
	size, inUse, err := s.sizes()
	if err != nil || size <= s.opts.MaxBytes || compactedSize(inUse)*2 > size {
		return false, err
	}
	return true, s.Compact()
}

// Maintain purges idle conversations and compacts the file when it is
// larger than MaxBytes, once now and then every interval, until ctx is done.
// Errors go to Options.OnError and Options.Logger. Run it in its own goroutine next to the
// Store (a serving process does; the forensic commands do not). An interval
// of zero or less means DefaultMaintainEvery.
func (s *Store) Maintain(ctx context.Context, every time.Duration) {
	if every <= 0 {
		every = DefaultMaintainEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.maintainOnce(); err != nil {
			s.opts.OnError(err)
			s.losses.add(losses{errors: 1}, err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *Store) maintainOnce() error {
	if _, err := s.Purge(s.opts.Now()); err != nil {
		return fmt.Errorf("originals: purge: %w", err)
	}
	_, err := s.compactIfLarge()
	return err
}
