package boltdb_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/shaperproxy/shaperproxy/internal/boltdb"
)

func Example() {
	dir, _ := os.MkdirTemp("", "boltdb-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "state", "example.db")

	db, err := boltdb.Open(path, boltdb.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte("greetings"))
		if err != nil {
			return err
		}
		return b.Put([]byte("en"), []byte("hello"))
	})
	fmt.Println("update:", err)

	// A second process (here: a second Open) waits LockTimeout for the file.
	_, err = boltdb.Open(path, boltdb.Options{ReadOnly: true, LockTimeout: 10 * time.Millisecond})
	fmt.Println("locked:", errors.Is(err, boltdb.ErrLocked))

	db.Close()
	err = db.View(func(*bolt.Tx) error { return nil })
	fmt.Println("closed:", errors.Is(err, boltdb.ErrClosed))
	// Output:
	// update: <nil>
	// locked: true
	// closed: true
}
