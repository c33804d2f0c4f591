package ledger

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// openAt opens a Store at path and, when the test ends, closes it (if
// still open) and checks the file.
func openAt(tb testing.TB, path string, opts Options) *Store {
	tb.Helper()
	s, err := Open(path, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, errClosed) {
			tb.Errorf("close: %v", err)
		}
		c, err := Open(path, Options{LockTimeout: time.Second})
		if err != nil {
			tb.Errorf("reopen for check: %v", err)
			return
		}
		defer c.Close()
		if err := c.Check(); err != nil {
			tb.Errorf("check: %v", err)
		}
	})
	return s
}

func testPath(tb testing.TB) string {
	return filepath.Join(tb.TempDir(), "data", FileName)
}

func testInsertion(merged string) Insertion {
	return Insertion{
		Key:          sha256.Sum256([]byte(merged)),
		Draft:        []byte(`{"role":"assistant","content":"Done.","reasoning_content":"r"}`),
		Notice:       []byte(`{"role":"system","content":"Automatic masked review ..."}`),
		Continuation: []byte(`{"role":"assistant","content":"Correction.","reasoning_content":""}`),
	}
}

func TestInsertions(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	ins := testInsertion("Done.---Correction.")
	if err := s.PutInsertion("c:1", ins); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.Insertion("c:1", ins.Key)
	if err != nil || !ok {
		t.Fatalf("lookup: ok %v, err %v", ok, err)
	}
	if got.Key != ins.Key || !bytes.Equal(got.Draft, ins.Draft) || !bytes.Equal(got.Notice, ins.Notice) || !bytes.Equal(got.Continuation, ins.Continuation) {
		t.Errorf("got %+v", got)
	}
	// Misses: another key, another conversation, a conversation never seen.
	for _, tc := range []struct {
		conv string
		key  [32]byte
	}{{"c:1", sha256.Sum256([]byte("other"))}, {"c:2", ins.Key}} {
		if _, ok, err := s.Insertion(tc.conv, tc.key); ok || err != nil {
			t.Errorf("%s: ok %v, err %v; want a miss", tc.conv, ok, err)
		}
	}
	// Empty messages round-trip too.
	empty := Insertion{Key: sha256.Sum256([]byte("e"))}
	if err := s.PutInsertion("c:1", empty); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.Insertion("c:1", empty.Key); !ok || err != nil || len(got.Draft)+len(got.Notice)+len(got.Continuation) != 0 {
		t.Errorf("empty insertion: %+v %v %v", got, ok, err)
	}
}

func TestMarkReviewed(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	if ok, err := s.Reviewed("c:1", "t:1"); ok || err != nil {
		t.Fatalf("reviewed before any mark: %v %v", ok, err)
	}
	first, err := s.MarkReviewed("c:1", "t:1")
	if err != nil || !first {
		t.Fatalf("first mark: %v %v", first, err)
	}
	first, err = s.MarkReviewed("c:1", "t:1")
	if err != nil || first {
		t.Fatalf("second mark: first = %v, err %v", first, err)
	}
	if ok, _ := s.Reviewed("c:1", "t:1"); !ok {
		t.Error("not reviewed after the mark")
	}
	// Other turns and conversations are separate.
	if first, _ := s.MarkReviewed("c:1", "t:2"); !first {
		t.Error("another turn counted as marked")
	}
	if first, _ := s.MarkReviewed("c:2", "t:1"); !first {
		t.Error("another conversation counted as marked")
	}
}

// TestMarkReviewedConcurrent: of many concurrent marks of one turn,
// exactly one is first.
func TestMarkReviewedConcurrent(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	var firsts atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			first, err := s.MarkReviewed("c:1", "t:race")
			if err != nil {
				t.Error(err)
			}
			if first {
				firsts.Add(1)
			}
		})
	}
	wg.Wait()
	if n := firsts.Load(); n != 1 {
		t.Errorf("%d first marks, want 1", n)
	}
}

// TestReopen: checkpoints, insertions and values survive a restart.
func TestReopen(t *testing.T) {
	path := testPath(t)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ins := testInsertion("merged")
	if _, err := s.MarkReviewed("c:1", "t:1"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutInsertion("c:1", ins); err != nil {
		t.Fatal(err)
	}
	if err := s.Put("guard", "c:1", "ack", []byte("yes")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reviewed("c:1", "t:1"); !errors.Is(err, errClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	s = openAt(t, path, Options{})
	if first, err := s.MarkReviewed("c:1", "t:1"); first || err != nil {
		t.Errorf("after restart the mark is first again (%v, %v)", first, err)
	}
	if _, ok, _ := s.Insertion("c:1", ins.Key); !ok {
		t.Error("insertion lost")
	}
	if v, ok, _ := s.Get("guard", "c:1", "ack"); !ok || string(v) != "yes" {
		t.Errorf("value %q %v", v, ok)
	}
}

func TestPutGet(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	if _, ok, err := s.Get("guard", "c:1", "k"); ok || err != nil {
		t.Fatalf("get before put: %v %v", ok, err)
	}
	val := []byte("v1")
	if err := s.Put("guard", "c:1", "k", val); err != nil {
		t.Fatal(err)
	}
	val[0] = 'X' // the store holds its own copy
	got, ok, err := s.Get("guard", "c:1", "k")
	if err != nil || !ok || string(got) != "v1" {
		t.Fatalf("get: %q %v %v", got, ok, err)
	}
	if _, ok, _ := s.Get("other", "c:1", "k"); ok {
		t.Error("buckets are not separate")
	}
	if err := s.Put("guard", "c:1", "empty", nil); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := s.Get("guard", "c:1", "empty"); !ok || got == nil || len(got) != 0 {
		t.Errorf("empty value: %v %v", got, ok)
	}
	if err := s.Delete("guard", "c:1", "k"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get("guard", "c:1", "k"); ok {
		t.Error("value survives Delete")
	}
	for _, bad := range [][3]string{{"", "c:1", "k"}, {"b", "", "k"}, {"b", "c:1", ""}, {"b", string(make([]byte, maxConversationLen+1)), "k"}} {
		if err := s.Put(bad[0], bad[1], bad[2], nil); !errors.Is(err, errInvalid) {
			t.Errorf("Put(%.10q, %.10q, %.10q) = %v, want ErrInvalid", bad[0], bad[1], bad[2], err)
		}
	}
}

func TestClearConversation(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	ins := testInsertion("m")
	for _, c := range []string{"c:1", "c:2"} {
		if err := s.PutInsertion(c, ins); err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkReviewed(c, "t:1"); err != nil {
			t.Fatal(err)
		}
		if err := s.Put("guard", c, "k", []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.ClearConversation("c:1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearConversation("c:never"); err != nil {
		t.Errorf("clear unknown: %v", err)
	}
	_, ok1, _ := s.Insertion("c:1", ins.Key)
	r1, _ := s.Reviewed("c:1", "t:1")
	_, v1, _ := s.Get("guard", "c:1", "k")
	if ok1 || r1 || v1 {
		t.Errorf("c:1 not cleared: insertion %v, reviewed %v, value %v", ok1, r1, v1)
	}
	_, ok2, _ := s.Insertion("c:2", ins.Key)
	r2, _ := s.Reviewed("c:2", "t:1")
	if !ok2 || !r2 {
		t.Error("c:2 cleared too")
	}
}

func TestPurge(t *testing.T) {
	clk := testenv.NewClock()
	s := openAt(t, testPath(t), Options{Now: clk.Now})
	if _, err := s.MarkReviewed("c:old", "t:1"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutInsertion("c:touched", testInsertion("x")); err != nil {
		t.Fatal(err)
	}
	clk.Add(4 * 24 * time.Hour)
	if err := s.Put("guard", "c:new", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch("c:touched"); err != nil {
		t.Fatal(err)
	}
	if err := s.Touch("c:unknown"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.LastSeen("c:unknown"); ok {
		t.Error("Touch created a conversation")
	}
	clk.Add(3*24*time.Hour + time.Minute) // c:old is 7 days and a minute old
	n, err := s.Purge(clk.Now())
	if err != nil || n != 1 {
		t.Fatalf("purged %d, err %v; want 1", n, err)
	}
	if ok, _ := s.Reviewed("c:old", "t:1"); ok {
		t.Error("c:old survived")
	}
	if _, ok, _ := s.Insertion("c:touched", testInsertion("x").Key); !ok {
		t.Error("a touched conversation was purged")
	}
	if _, ok, _ := s.Get("guard", "c:new", "k"); !ok {
		t.Error("c:new was purged")
	}
	if n, _ := s.Purge(clk.Now().Add(8 * 24 * time.Hour)); n != 2 {
		t.Errorf("purged %d later, want 2", n)
	}
}

// TestTouchWritesRarely: a fresh last-seen time is not written again.
func TestTouchWritesRarely(t *testing.T) {
	clk := testenv.NewClock()
	s := openAt(t, testPath(t), Options{Now: clk.Now})
	if err := s.Put("b", "c:1", "k", nil); err != nil {
		t.Fatal(err)
	}
	seen0, _, _ := s.LastSeen("c:1")
	clk.Add(TouchEvery / 2)
	_ = s.Touch("c:1")
	if seen, _, _ := s.LastSeen("c:1"); !seen.Equal(seen0) {
		t.Errorf("Touch wrote a fresh time: %v -> %v", seen0, seen)
	}
	clk.Add(TouchEvery)
	_ = s.Touch("c:1")
	if seen, _, _ := s.LastSeen("c:1"); !seen.Equal(clk.Now()) {
		t.Errorf("Touch did not refresh a stale time: %v, now %v", seen, clk.Now())
	}
}

func TestFileMode(t *testing.T) {
	path := testPath(t)
	s := openAt(t, path, Options{})
	if _, err := s.MarkReviewed("c:1", "t:1"); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("file mode %o, want 600", m)
	}
	di, _ := os.Stat(filepath.Dir(path))
	if m := di.Mode().Perm(); m != 0o700 {
		t.Errorf("dir mode %o, want 700", m)
	}
}

// TestFileModeTightened: a file created with a loose mode is tightened.
func TestFileModeTightened(t *testing.T) {
	path := testPath(t)
	s := openAt(t, path, Options{})
	s.Close()
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	openAt(t, path, Options{})
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %o after reopen, want 600", fi.Mode().Perm())
	}
}

func TestLocked(t *testing.T) {
	path := testPath(t)
	openAt(t, path, Options{})
	_, err := Open(path, Options{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, errLocked) {
		t.Errorf("second open: %v, want ErrLocked", err)
	}
}

func TestDecodeCorrupt(t *testing.T) {
	good := encodeInsertion(testInsertion("m"))
	for i, v := range [][]byte{nil, {9}, good[:len(good)-1], append(bytes.Clone(good), 0), {1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}} {
		if _, err := decodeInsertion([32]byte{}, v); !errors.Is(err, errCorrupt) {
			t.Errorf("case %d: err %v, want ErrCorrupt", i, err)
		}
	}
}

// TestConcurrentUse exercises every method from several goroutines (run
// with -race).
func TestConcurrentUse(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 8 {
				c := fmt.Sprintf("c:%d:%d", g, i%3) // only this goroutine clears it
				ins := testInsertion(fmt.Sprint(g, i))
				if err := s.PutInsertion(c, ins); err != nil {
					t.Error(err)
				}
				if _, ok, err := s.Insertion(c, ins.Key); !ok || err != nil {
					t.Error("lost insertion", err)
				}
				_, _ = s.MarkReviewed("c:shared", fmt.Sprint("t:", i))
				_ = s.Put("b", c, "k", []byte{byte(i)})
				_, _, _ = s.Get("b", c, "k")
				_ = s.Touch(c)
				if i%5 == 4 {
					_ = s.ClearConversation(c)
				}
			}
		})
	}
	wg.Wait()
}
