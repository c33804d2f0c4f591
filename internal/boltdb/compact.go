package boltdb

import (
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// CompactSuffix names the file Compact writes next to the database
// (path + CompactSuffix) before renaming it over the database.
const CompactSuffix = ".compact"

// Compact rewrites the database into a fresh file and renames it over the
// old one: bbolt reuses freed pages but never shrinks its file. txMaxSize
// bounds the size of each transaction of the copy (zero: one transaction).
//
// Compact blocks every other method while it runs. The new file is written
// next to the database, committed and synced, then renamed over it while
// the old file is open and locked, so no other process can take the file
// in between. On an error before the rename the DB goes on with the old
// file and the new one is removed; a crash leaves the old file intact and
// the new one is removed by the next Open. A process that opened the old
// file before the rename keeps reading the old (unchanged) data. Renaming
// an open file is POSIX behaviour: Compact is not supported on Windows.
func (d *DB) Compact(txMaxSize int64) error {
	return d.locked(&d.mu, true, func(*bolt.DB) error { return d.compact(txMaxSize) })
}

// compact does Compact's work. d.mu must be write-locked.
func (d *DB) compact(txMaxSize int64) error {
	tmp := d.path + CompactSuffix
	_ = os.Remove(tmp)
	dst, err := open(tmp, d.opts)
	if err != nil {
		return err
	}
	if err := d.replaceWith(dst, tmp, txMaxSize); err != nil {
		dst.Close()
		os.Remove(tmp)
		return err
	}
	return nil
}

// replaceWith copies the database into dst, renames dst's file (tmp) over
// the database and makes dst the DB's database. d.mu must be write-locked.
func (d *DB) replaceWith(dst *bolt.DB, tmp string, txMaxSize int64) error {
	if err := bolt.Compact(dst, d.db, txMaxSize); err != nil {
		return err
	}
	if err := os.Rename(tmp, d.path); err != nil {
		return err
	}
	old := d.db
	d.db = dst
	_ = syncDir(filepath.Dir(d.path))
	_ = old.Close() // the old file is unlinked; nothing is lost if this fails
	return nil
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
