package boltdb

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

var bucket = []byte("b")

// testPath returns a path under t.TempDir in a directory that does not
// exist yet.
func testPath(tb testing.TB) string {
	return filepath.Join(tb.TempDir(), "data", "test.db")
}

// openTest opens a DB at path and, when the test ends, closes it (if still
// open) and checks the file's consistency.
func openTest(tb testing.TB, path string, o Options) *DB {
	tb.Helper()
	d, err := Open(path, o)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := d.Close(); err != nil && !errors.Is(err, ErrClosed) {
			tb.Errorf("close: %v", err)
		}
		c, err := Open(path, Options{ReadOnly: true})
		if err != nil {
			tb.Errorf("reopen for check: %v", err)
			return
		}
		defer c.Close()
		if err := c.View(Check); err != nil {
			tb.Errorf("check: %v", err)
		}
	})
	return d
}

func put(tb testing.TB, d *DB, key string, value []byte) {
	tb.Helper()
	err := d.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists(bucket)
		if err != nil {
			return err
		}
		return b.Put([]byte(key), value)
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func get(tb testing.TB, d *DB, key string) []byte {
	tb.Helper()
	var v []byte
	err := d.View(func(tx *bolt.Tx) error {
		if b := tx.Bucket(bucket); b != nil {
			v = bytes.Clone(b.Get([]byte(key)))
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

// stat returns the size and the permission bits of the file at path.
func stat(tb testing.TB, path string) (int64, fs.FileMode) {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size(), fi.Mode().Perm()
}

func TestOpenModes(t *testing.T) {
	path := testPath(t)
	d := openTest(t, path, Options{})
	if got := d.Path(); got != path {
		t.Errorf("Path: got %q, want %q", got, path)
	}
	for p, want := range map[string]fs.FileMode{path: 0o600, filepath.Dir(path): 0o700} {
		if _, got := stat(t, p); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}
}

func TestOpenTightensMode(t *testing.T) {
	path := testPath(t)
	openTest(t, path, Options{}).Close()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	r := openTest(t, path, Options{ReadOnly: true})
	if _, got := stat(t, path); got != 0o644 {
		t.Errorf("after a read-only open: mode %v, want 0644 untouched", got)
	}
	r.Close()
	openTest(t, path, Options{})
	if _, got := stat(t, path); got != 0o600 {
		t.Errorf("after reopening a 0644 file: mode %v, want 0600", got)
	}
}

func TestLocked(t *testing.T) {
	path := testPath(t)
	openTest(t, path, Options{})
	for _, o := range []Options{{}, {ReadOnly: true}} {
		o.LockTimeout = 100 * time.Millisecond
		start := time.Now()
		_, err := Open(path, o)
		if !errors.Is(err, ErrLocked) {
			t.Errorf("second Open(%+v): got %v, want ErrLocked", o, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("ErrLocked after %v, want about the 100ms timeout", d)
		}
	}
}

func TestClosed(t *testing.T) {
	d := openTest(t, testPath(t), Options{})
	put(t, d, "k", []byte("v"))
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"View":    func() error { return d.View(func(*bolt.Tx) error { return nil }) },
		"Update":  func() error { return d.Update(func(*bolt.Tx) error { return nil }) },
		"Compact": func() error { return d.Compact(0) },
		"Close":   d.Close,
	}
	for name, call := range calls {
		if err := call(); !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: got %v, want ErrClosed", name, err)
		}
	}
}

func TestReadOnly(t *testing.T) {
	path := testPath(t)
	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only Open of a missing file: got %v, want ErrNotExist", err)
	}
	if _, err := os.Stat(filepath.Dir(path)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only Open created the directory: %v", err)
	}
	w := openTest(t, path, Options{})
	put(t, w, "k", []byte("v"))
	w.Close()

	r1 := openTest(t, path, Options{ReadOnly: true})
	r2 := openTest(t, path, Options{ReadOnly: true}) // readers share the lock
	for _, r := range []*DB{r1, r2} {
		if got := get(t, r, "k"); string(got) != "v" {
			t.Errorf("read-only View: got %q, want %q", got, "v")
		}
	}
	if err := r1.Update(func(*bolt.Tx) error { return nil }); !errors.Is(err, errReadOnly) {
		t.Errorf("read-only Update: got %v, want ErrReadOnly", err)
	}
	if err := r1.Compact(0); !errors.Is(err, errReadOnly) {
		t.Errorf("read-only Compact: got %v, want ErrReadOnly", err)
	}
}

func TestUpdateRollsBack(t *testing.T) {
	d := openTest(t, testPath(t), Options{})
	put(t, d, "k", []byte("v"))
	errStop := errors.New("stop")
	err := d.Update(func(tx *bolt.Tx) error {
		if err := tx.Bucket(bucket).Put([]byte("k"), []byte("w")); err != nil {
			return err
		}
		return errStop
	})
	if !errors.Is(err, errStop) {
		t.Errorf("Update: got %v, want fn's error", err)
	}
	if got := get(t, d, "k"); string(got) != "v" {
		t.Errorf("after a failed Update: got %q, want %q", got, "v")
	}
}

func TestCompact(t *testing.T) {
	path := testPath(t)
	d := openTest(t, path, Options{})
	big := bytes.Repeat([]byte("x"), 4096)
	for i := range 1000 {
		put(t, d, fmt.Sprint("big", i), big)
	}
	put(t, d, "keep", []byte("v"))
	err := d.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucket)
		for i := range 1000 {
			if err := b.Delete(fmt.Append(nil, "big", i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	before, _ := stat(t, path)
	if err := d.Compact(1 << 20); err != nil {
		t.Fatal(err)
	}
	if after, _ := stat(t, path); after*4 > before {
		t.Errorf("Compact: file %d -> %d bytes, want at least 4x smaller", before, after)
	}
	if got := get(t, d, "keep"); string(got) != "v" {
		t.Errorf("after Compact: got %q, want %q", got, "v")
	}
	if _, err := os.Stat(path + CompactSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary file left behind: %v", err)
	}
	put(t, d, "after", []byte("w")) // the DB goes on with the new file
	if _, got := stat(t, path); got != 0o600 {
		t.Errorf("compacted file: mode %v, want 0600", got)
	}
}

// TestOpenRemovesCompactLeftover: what a crashed Compact left is removed by
// the next writing Open.
func TestOpenRemovesCompactLeftover(t *testing.T) {
	path := testPath(t)
	openTest(t, path, Options{}).Close()
	if err := os.WriteFile(path+CompactSuffix, []byte("half a file"), 0o600); err != nil {
		t.Fatal(err)
	}
	openTest(t, path, Options{})
	if _, err := os.Stat(path + CompactSuffix); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("leftover of a compaction not removed: %v", err)
	}
}

// TestConcurrentUse runs View, Update and Compact from several goroutines
// and closes the DB under them (run with -race): every call either works
// or returns ErrClosed.
func TestConcurrentUse(t *testing.T) {
	d := openTest(t, testPath(t), Options{})
	put(t, d, "k", []byte("v"))
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 50 {
				err := d.Update(func(tx *bolt.Tx) error {
					return tx.Bucket(bucket).Put(fmt.Append(nil, g, "-", i), []byte("v"))
				})
				if err == nil {
					err = d.View(func(tx *bolt.Tx) error { return nil })
				}
				if err == nil && i%10 == 9 {
					err = d.Compact(0)
				}
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
				}
			}
		})
	}
	time.Sleep(20 * time.Millisecond)
	if err := d.Close(); err != nil {
		t.Error(err)
	}
	wg.Wait()
}
