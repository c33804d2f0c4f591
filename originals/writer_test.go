package originals

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"
)

// stall blocks the Writer's commits (which take the Store's read lock) until
// the returned func is called, after the goroutine has picked up a first
// operation so the queue is empty and waiting.
func stall(t *testing.T, s *Store, w *Writer) (release func()) {
	t.Helper()
	s.mu.Lock()
	w.Put([]Entry{entry("stall", 1, "stall", "o")})
	deadline := time.Now().Add(5 * time.Second)
	for len(w.ops) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the writer did not pick up its first operation")
		}
		time.Sleep(time.Millisecond)
	}
	return sync.OnceFunc(s.mu.Unlock)
}

func TestWriterDropsAndCountsWhenFull(t *testing.T) {
	s := openTest(t, Options{})
	w := s.Async(4)
	defer w.Close()
	release := stall(t, s, w)
	defer release()

	for i := range 4 {
		w.Put([]Entry{entry("a", 1, fmt.Sprintf("kept%d", i), "o")})
	}
	w.Put([]Entry{entry("a", 1, "lost1", "o"), entry("a", 1, "lost2", "o")})
	w.Put([]Entry{entry("a", 1, "lost3", "o")})
	if got := w.Dropped(); got != 3 {
		t.Errorf("Dropped: got %d, want 3 entries", got)
	}
	w.BeginTurn("b", 1) // a full queue of Puts still takes a turn change
	if got := len(w.ops); got != 5 {
		t.Errorf("queue: %d operations, want 4 Puts and the BeginTurn", got)
	}
	release()
	w.Flush()
	want := []string{"a/1/kept0", "a/1/kept1", "a/1/kept2", "a/1/kept3"}
	if got := listKeys(t, s, "a"); !slices.Equal(got, want) {
		t.Errorf("stored: got %q, want %q", got, want)
	}
}

func TestWriterKeepsOrder(t *testing.T) {
	s := openTest(t, Options{})
	w := s.Async(64)
	w.Put([]Entry{entry("a", 1, "a1", "o"), entry("b", 1, "b1", "o")})
	w.BeginTurn("a", 2)
	w.Put([]Entry{entry("a", 2, "a2", "o")})
	w.Put([]Entry{entry("a", 1, "late", "o")}) // an earlier turn after the change: ignored
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := listKeys(t, s, ""), []string{"a/2/a2", "b/1/b1"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestWriterTurnOverflow(t *testing.T) {
	s := openTest(t, Options{})
	mustPut(t, s, entry("a", 1, "a1", "o"))
	w := s.Async(1)
	defer w.Close()
	release := stall(t, s, w)
	for i := range cap(w.ops) {
		w.BeginTurn(fmt.Sprintf("other%d", i), 1)
	}
	w.BeginTurn("a", 2) // no room at all: applied after the queue
	w.Put([]Entry{entry("a", 2, "dropped", "o")})
	release()
	w.Flush()
	if got := listKeys(t, s, "a"); len(got) != 0 {
		t.Errorf("conversation a after an overflowing BeginTurn(2): got %q, want its turn 1 cleared", got)
	}
	if w.Dropped() != 1 {
		t.Errorf("Dropped: got %d, want 1", w.Dropped())
	}
}

func TestWriterInvalidEntriesCounted(t *testing.T) {
	var mu sync.Mutex
	var reported []error
	s := openTest(t, Options{OnError: func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }})
	w := s.Async(8)
	w.Put([]Entry{entry("", 1, "s", "o")})
	w.Put([]Entry{entry("a", 1, "ok", "o")})
	err := w.Close()
	if !errors.Is(err, ErrInvalid) || w.Failed() != 1 {
		t.Errorf("Close: %v, Failed %d; want ErrInvalid and 1", err, w.Failed())
	}
	if len(reported) != 1 {
		t.Errorf("OnError called %d times, want 1", len(reported))
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"a/1/ok"}) {
		t.Errorf("the valid Put next to an invalid one: got %q", got)
	}
}

func TestWriterAfterClose(t *testing.T) {
	s := openTest(t, Options{})
	w := s.Async(8)
	w.Put([]Entry{entry("a", 1, "s", "o")})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	w.Put([]Entry{entry("a", 1, "t", "o")})
	w.BeginTurn("a", 2)
	w.Flush()
	if w.Dropped() != 1 {
		t.Errorf("Put after Close: Dropped %d, want 1", w.Dropped())
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, []string{"a/1/s"}) {
		t.Errorf("got %q", got)
	}
}

// TestConcurrentUse runs writers, readers and compactions together; run it
// with -race.
func TestConcurrentUse(t *testing.T) {
	s := openTest(t, Options{MaxBytes: 64 << 10})
	w := s.Async(256)
	var wg sync.WaitGroup
	for g := range 4 {
		conv := fmt.Sprintf("c%d", g)
		wg.Go(func() {
			for turn := 1; turn <= 20; turn++ {
				w.BeginTurn(conv, turn)
				for i := range 5 {
					w.Put([]Entry{entry(conv, turn, fmt.Sprintf("%s-%d-%d", conv, turn, i), text(uint64(i), 2048))})
				}
			}
		})
	}
	wg.Go(func() {
		for i := range 20 {
			if _, err := s.Lookup(fmt.Sprintf("c0-%d-0", i)); err != nil {
				t.Error(err)
			}
			if _, err := s.Stats(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		for range 3 {
			if err := s.Compact(); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for g := range 4 {
		conv := fmt.Sprintf("c%d", g)
		got := listKeys(t, s, conv)
		if len(got) > 5 {
			t.Errorf("%s: %d entries, want at most the 5 of its last turn", conv, len(got))
		}
		for _, k := range got {
			if want := fmt.Sprintf("%s/20/", conv); len(k) < len(want) || k[:len(want)] != want {
				t.Errorf("%s: entry %q is not from the last turn", conv, k)
			}
		}
	}
	if w.Dropped()+w.Failed() == 0 {
		if got := len(listKeys(t, s, "")); got != 20 {
			t.Errorf("nothing dropped, but %d entries stored, want 20", got)
		}
	}
}
