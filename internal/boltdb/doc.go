// Package boltdb is the project's owner of go.etcd.io/bbolt: one file,
// opened the way every store here opens it, and safe to close.
//
//	db, err := boltdb.Open(path, boltdb.Options{})
//	if errors.Is(err, boltdb.ErrLocked) { ... } // another process has the file
//	defer db.Close()
//	err = db.Update(func(tx *bolt.Tx) error {
//		b, err := tx.CreateBucketIfNotExists([]byte("b"))
//		if err != nil {
//			return err
//		}
//		return b.Put([]byte("k"), []byte("v"))
//	})
//
// Open creates the file with mode 0600 in a directory of mode 0700 and
// tightens a file someone else left wider. It waits at most LockTimeout for
// bbolt's file lock. View and Update are bbolt's; after Close they return
// ErrClosed instead of touching a closed file. Compact rewrites the file so
// it shrinks, which bbolt alone never does.
//
// Packages built on it keep their own sentinel errors and map these to them.
package boltdb
