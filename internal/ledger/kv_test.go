package ledger

import (
	"bytes"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// reopen closes s and opens its file again.
func reopen(t *testing.T, s *Store) *Store {
	t.Helper()
	path := s.Path()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openAt(t, path, Options{})
}

func wantValue(t *testing.T, s *Store, key, want string, wantOK bool) {
	t.Helper()
	v, ok, err := s.Get("b", "c1", key)
	if err != nil || ok != wantOK || string(v) != want {
		t.Fatalf("Get(%q) = %q, %v, %v; want %q, %v", key, v, ok, err, want, wantOK)
	}
}

// TestPutLater: the value is read back at once, reaches the file in the
// background, and Close writes what is still queued.
func TestPutLater(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	if err := s.PutLater("b", "c1", "k", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	wantValue(t, s, "k", "v1", true)
	s.Flush()
	if st := s.Stats(); st.Written != 1 || st.Pending != 0 || st.Lost != 0 {
		t.Fatalf("stats %+v", st)
	}
	s = reopen(t, s)
	wantValue(t, s, "k", "v1", true)
	for i := range 50 { // no Flush: Close writes them
		if err := s.PutLater("b", "c1", "k", fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	s = reopen(t, s)
	wantValue(t, s, "k", "v49", true)
}

// TestPutLaterCommitsSeldom: values queued one after another (the guard's
// state changing on many requests at once) share commits (at most one per
// writeEvery, the first at once); every value reaches the file.
func TestPutLaterCommitsSeldom(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	const n = 100
	start := time.Now()
	for i := range n {
		if err := s.PutLater("b", fmt.Sprintf("c%d", i), "k", fmt.Appendf(nil, "v%d", i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // 1,000 requests a second
	}
	s.Flush()
	elapsed := time.Since(start)
	st := s.Stats()
	// One commit at once, then at most one per writeEvery, and the Flush's.
	if most := int64(elapsed/writeEvery) + 2; st.Commits > most || st.Written != n || st.Lost != 0 {
		t.Fatalf("%d values over %v: %d commits (at most %d), %d written, %d lost", n, elapsed, st.Commits, most, st.Written, st.Lost)
	}
	// A lone value after a quiet spell goes at once: the writer is not
	// holding it back (nothing else is queued; Flush is not called).
	time.Sleep(2 * writeEvery)
	before := s.Stats().Commits
	if err := s.PutLater("b", "c1", "k", []byte("alone")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Commits == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a lone value was not written")
		}
	}
	s = reopen(t, s)
	v, ok, err := s.Get("b", "c1", "k")
	if err != nil || !ok || string(v) != "alone" {
		t.Fatalf("after reopening: %q, %v, %v", v, ok, err)
	}
	for i := range n {
		if i == 1 {
			continue // c1's value was replaced
		}
		v, ok, err := s.Get("b", fmt.Sprintf("c%d", i), "k")
		if err != nil || !ok || string(v) != fmt.Sprintf("v%d", i) {
			t.Fatalf("c%d after reopening: %q, %v, %v", i, v, ok, err)
		}
	}
}

// TestFlushEndsThePause: a Flush does not wait for the writer's pause
// between commits (here an hour) to write what is queued.
func TestFlushEndsThePause(t *testing.T) {
	defer func(d time.Duration) { writeEvery = d }(writeEvery)
	writeEvery = time.Hour
	s := openAt(t, testPath(t), Options{})
	for i := range 3 { // the first commits at once, the writer then pauses
		if err := s.PutLater("b", "c1", fmt.Sprint(i), []byte("v")); err != nil {
			t.Fatal(err)
		}
		s.Flush()
	}
	if st := s.Stats(); st.Written != 3 || st.Pending != 0 {
		t.Fatalf("stats %+v", st)
	}
	s = reopen(t, s) // Close does not wait for it either
	wantValue(t, s, "2", "v", true)
}

// TestPutLaterOrder: Put, Delete and ClearConversation never lose to a
// value queued before them.
func TestPutLaterOrder(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	s.kv.writeMu.Lock() // the writer cannot take the queued values yet
	_ = s.PutLater("b", "c1", "put", []byte("later"))
	_ = s.PutLater("b", "c1", "del", []byte("later"))
	_ = s.PutLater("b", "c1", "kept", []byte("later"))
	_ = s.PutLater("b", "c2", "cleared", []byte("later"))
	s.kv.writeMu.Unlock()
	if err := s.Put("b", "c1", "put", []byte("now")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("b", "c1", "del"); err != nil {
		t.Fatal(err)
	}
	if err := s.ClearConversation("c2"); err != nil {
		t.Fatal(err)
	}
	s.Flush()
	for range 2 { // from memory, then from the file
		wantValue(t, s, "put", "now", true)
		wantValue(t, s, "del", "", false)
		wantValue(t, s, "kept", "later", true)
		if _, ok, _ := s.Get("b", "c2", "cleared"); ok {
			t.Fatal("cleared conversation's value came back")
		}
		s = reopen(t, s)
	}
}

// TestPutLaterDoesNotWait: PutLater returns while a write holds the file.
func TestPutLaterDoesNotWait(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	s.kv.writeMu.Lock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 100 {
			_ = s.PutLater("b", "c1", "k", fmt.Appendf(nil, "%d", i))
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("PutLater waited for the writer")
	}
	s.kv.writeMu.Unlock()
	s.Flush()
	wantValue(t, s, "k", "99", true)
}

// TestPutLaterPurge: a value queued for a conversation Purge removes
// brings it back; values memory held of removed conversations go.
func TestPutLaterPurge(t *testing.T) {
	clk := testenv.NewClock()
	s := openAt(t, testPath(t), Options{Now: clk.Now})
	if err := s.Put("b", "old", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	wantOld := func(want bool) {
		t.Helper()
		if _, ok, _ := s.Get("b", "old", "k"); ok != want {
			t.Fatalf("old conversation's value present = %v, want %v", ok, want)
		}
	}
	wantOld(true)
	clk.Add(30 * 24 * time.Hour)
	if err := s.Put("b", "queued", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	clk.Add(30 * 24 * time.Hour)
	s.kv.writeMu.Lock()
	_ = s.PutLater("b", "queued", "k", []byte("v2"))
	s.kv.writeMu.Unlock()
	if n, err := s.Purge(clk.Now()); err != nil || n < 1 {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	wantOld(false)
	s.Flush()
	s = reopen(t, s)
	if v, ok, _ := s.Get("b", "queued", "k"); !ok || string(v) != "v2" {
		t.Fatalf("queued value = %q, %v", v, ok)
	}
}

// TestKVConcurrent runs PutLater, Put and Get together (for -race): each
// goroutine reads back its own last value.
func TestKVConcurrent(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := fmt.Sprintf("c%d", g)
			for i := range 200 {
				v := fmt.Appendf(nil, "%d", i)
				var err error
				if i%17 == 0 {
					err = s.Put("b", conv, "k", v)
				} else {
					err = s.PutLater("b", conv, "k", v)
				}
				if err != nil {
					t.Error(err)
					return
				}
				if got, ok, err := s.Get("b", conv, "k"); err != nil || !ok || string(got) != string(v) {
					t.Errorf("%s: Get = %q, %v, %v; want %q", conv, got, ok, err, v)
					return
				}
			}
		}()
	}
	wg.Wait()
	s = reopen(t, s)
	for g := range 8 {
		if got, _, _ := s.Get("b", fmt.Sprintf("c%d", g), "k"); string(got) != "199" {
			t.Errorf("c%d: %q after reopen", g, got)
		}
	}
}

// TestPutLaterLarge: a value too large for the cache is read back at once
// from the queue, and after its write from the file; the older value it
// replaced is never served again.
func TestPutLaterLarge(t *testing.T) {
	s := openAt(t, testPath(t), Options{})
	if err := s.Put("b", "c1", "k", []byte("small")); err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("x"), 2*maxCachedValue)
	wantBig := func(when string) {
		t.Helper()
		v, ok, err := s.Get("b", "c1", "k")
		if err != nil || !ok || !bytes.Equal(v, big) {
			t.Fatalf("%s: Get gave %d bytes (%.10q), %v, %v; want the %d-byte value", when, len(v), v, ok, err, len(big))
		}
	}
	for range 2 {
		if err := s.PutLater("b", "c1", "k", big); err != nil {
			t.Fatal(err)
		}
		wantBig("queued")
		s.Flush()
		wantBig("written")
		wantBig("read again")
	}
	s = reopen(t, s)
	wantBig("reopened")
}

// wantQueued checks the queue's byte count against its values.
func wantQueued(t *testing.T, s *Store, want int) {
	t.Helper()
	k := &s.kv
	k.mu.Lock()
	defer k.mu.Unlock()
	sum := 0
	for _, v := range k.pending {
		sum += len(v)
	}
	if k.queued != sum || sum != want {
		t.Fatalf("queued bytes: counted %d, held %d, want %d", k.queued, sum, want)
	}
}

// TestPutLaterBoundsBytes: the values waiting for the writer are bounded
// in bytes as well as in number (a value is as large as a client's history
// makes it); past the bound a value is lost and counted, and a value
// replacing a queued one counts in its place.
func TestPutLaterBoundsBytes(t *testing.T) {
	defer func(n int) { maxPendingBytes = n }(maxPendingBytes)
	maxPendingBytes = 100
	s := openAt(t, testPath(t), Options{})
	put := func(conv string, n int) {
		t.Helper()
		if err := s.PutLater("b", conv, "k", bytes.Repeat([]byte("x"), n)); err != nil {
			t.Fatal(err)
		}
	}
	has := func(conv string) bool {
		t.Helper()
		_, ok, err := s.Get("b", conv, "k")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	s.kv.writeMu.Lock() // the writer cannot take the queued values yet
	locked := true
	defer func() {
		if locked { // a failure: Close waits for the writer
			s.kv.writeMu.Unlock()
		}
	}()
	put("c1", 60)
	put("c2", 60) // 120 bytes: lost
	wantQueued(t, s, 60)
	put("c1", 90) // replaces c1's 60: 90 bytes
	wantQueued(t, s, 90)
	put("c3", 20) // 110 bytes: lost
	wantQueued(t, s, 90)
	if st := s.Stats(); st.Lost != 2 || st.Pending != 1 {
		t.Fatalf("stats %+v, want 2 lost and 1 pending", st)
	}
	if has("c2") || has("c3") || !has("c1") {
		t.Fatal("a lost value is read back, or the queued one is not")
	}
	put("c1", 101) // refused in place of the queued one: both go
	wantQueued(t, s, 0)
	if has("c1") || s.Stats().Lost != 3 {
		t.Fatalf("a refused replacement: c1 read back %v, stats %+v", has("c1"), s.Stats())
	}
	put("c1", 50)
	wantQueued(t, s, 50)
	s.kv.mu.Lock()
	s.kv.forgetConversations(map[string]bool{"c1": true}, false) // as ClearConversation
	s.kv.mu.Unlock()
	wantQueued(t, s, 0)
	put("c3", 100) // the room is back
	wantQueued(t, s, 100)
	s.kv.writeMu.Unlock()
	locked = false
	s.Flush()
	wantQueued(t, s, 0) // the writer took them
	put("c2", 100)
	s = reopen(t, s)
	for _, c := range []string{"c2", "c3"} {
		if !has(c) {
			t.Fatalf("%s not written", c)
		}
	}
}

// TestPutLaterBytesAfterPut: Put and Delete take a queued value's bytes
// out of the count (the writer paused, so the values stay queued).
func TestPutLaterBytesAfterPut(t *testing.T) {
	defer func(d time.Duration) { writeEvery = d }(writeEvery)
	writeEvery = time.Hour
	s := openAt(t, testPath(t), Options{})
	if err := s.PutLater("b", "c0", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	// The first commit goes at once; the writer then pauses for an hour
	// (a Flush would end the pause: none is called before the end).
	for deadline := time.Now().Add(10 * time.Second); s.Stats().Commits == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first value was not written")
		}
	}
	for _, c := range []string{"c1", "c2"} {
		if err := s.PutLater("b", c, "k", bytes.Repeat([]byte("x"), 40)); err != nil {
			t.Fatal(err)
		}
	}
	wantQueued(t, s, 80)
	if err := s.Put("b", "c1", "k", []byte("now")); err != nil {
		t.Fatal(err)
	}
	wantQueued(t, s, 40)
	if err := s.Delete("b", "c2", "k"); err != nil {
		t.Fatal(err)
	}
	wantQueued(t, s, 0)
	wantValue(t, s, "k", "now", true) // c1's
}
