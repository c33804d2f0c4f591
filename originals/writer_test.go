package originals

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// gate is an Options.Now that, once armed, blocks the next caller until
// released: the Writer calls Now inside its transaction, so a test can hold
// the Writer in the middle of a commit.
type gate struct {
	armed   atomic.Bool
	entered chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{entered: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) Now() time.Time {
	if g.armed.CompareAndSwap(true, false) {
		close(g.entered)
		<-g.release
	}
	return time.Now()
}

// stall holds w inside the commit of a first Put, so its queue is empty
// and nothing drains it until release is called.
func stall(t *testing.T, g *gate, w *Writer) (release func()) {
	t.Helper()
	g.armed.Store(true)
	w.Put([]Entry{entry("stall", 1, "stall", "o")})
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the writer did not start its first commit")
	}
	return sync.OnceFunc(func() { close(g.release) })
}

// stalledWriter returns a store and its Writer (queue pending Puts)
// stalled as stall leaves it, closed when the test ends.
func stalledWriter(t *testing.T, queue int) (*Store, *Writer, func()) {
	t.Helper()
	g := newGate()
	s := openTest(t, Options{Now: g.Now})
	w := s.Async(queue)
	t.Cleanup(func() { w.Close() })
	release := stall(t, g, w)
	t.Cleanup(release) // before the Close (cleanups run last first)
	return s, w, release
}

func TestWriterDropsAndCountsWhenFull(t *testing.T) {
	s, w, release := stalledWriter(t, 4)
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

// TestWriterCommitsSeldom: Puts queued one after another (an agent's loop
// shaping a new block on each request) share commits: at most one per
// commitEvery, the first at once; every entry is written.
func TestWriterCommitsSeldom(t *testing.T) {
	s := openTest(t, Options{})
	w := s.Async(1024)
	defer w.Close()
	const n = 100
	start := time.Now()
	for i := range n {
		w.Put([]Entry{entry(fmt.Sprintf("c%d", i), 1, fmt.Sprintf("s%d", i), "o")})
		time.Sleep(time.Millisecond)
	}
	w.Flush()
	elapsed := time.Since(start)
	if most := int64(elapsed/commitEvery) + 2; w.commits.Load() > most {
		t.Fatalf("%d Puts over %v: %d commits, at most %d", n, elapsed, w.commits.Load(), most)
	}
	if got := len(listKeys(t, s, "")); got != n || w.Dropped() != 0 || w.Failed() != 0 {
		t.Fatalf("%d entries written of %d (dropped %d, failed %d)", got, n, w.Dropped(), w.Failed())
	}
	// A lone Put after a quiet spell is written without a Flush.
	time.Sleep(2 * commitEvery)
	before := w.commits.Load()
	w.Put([]Entry{entry("alone", 1, "s", "o")})
	for deadline := time.Now().Add(10 * time.Second); w.commits.Load() == before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a lone Put was not committed")
		}
	}
}

// TestWriterBacklogNotPaused: a backlog (full batches) is written commit
// after commit, without the pause between commits: with a pause of an hour,
// every queued Put is still written, without a Flush.
func TestWriterBacklogNotPaused(t *testing.T) {
	defer func(d time.Duration) { commitEvery = d }(commitEvery)
	commitEvery = time.Hour
	s, w, release := stalledWriter(t, 1024)
	const n = 3*maxBatch - 10
	for i := range n {
		w.Put([]Entry{entry(fmt.Sprintf("c%d", i), 1, fmt.Sprintf("s%d", i), "o")})
	}
	release()
	for deadline := time.Now().Add(20 * time.Second); len(listKeys(t, s, "")) < n+1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d entries written: the writer paused with a backlog", len(listKeys(t, s, "")), n+1)
		}
	}
	if w.Dropped() != 0 {
		t.Fatalf("%d dropped", w.Dropped())
	}
	// Paused now (the last batch was short): a Flush does not wait the hour.
	w.Put([]Entry{entry("late", 1, "s", "o")})
	w.Flush()
	if got := len(listKeys(t, s, "")); got != n+2 {
		t.Fatalf("after a Flush, %d of %d entries written", got, n+2)
	}
}

func TestWriterTurnOverflow(t *testing.T) {
	g := newGate()
	s := openTest(t, Options{Now: g.Now})
	mustPut(t, s, entry("a", 1, "a1", "o"))
	w := s.Async(1)
	defer w.Close()
	release := stall(t, g, w)
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
	// The bound is bound_test.go's subject; here it is far enough that
	// concurrency is what is tested (at 64 KiB a compaction running beside
	// the writer could hold the file at bbolt's size limit).
	s := openTest(t, Options{MaxBytes: 4 << 20})
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
	// Every entry of the last turns is stored or counted lost: dropped
	// (queue full), failed, or refused and evicted at the table's bound
	// (compactions running meanwhile can hold the file at it).
	stored := int64(len(listKeys(t, s, "")))
	lost := w.Dropped() + w.Failed() + w.Refused() + w.Evicted()
	if stored > 20 || stored+lost < 20 {
		t.Errorf("%d entries stored and %d counted lost, want 20 of the last turns stored or counted", stored, lost)
	}
}

// TestWriterBeginsATurnOnce: beginning the turn a conversation already
// began queues nothing; a new turn, or another conversation, does.
func TestWriterBeginsATurnOnce(t *testing.T) {
	st, err := Open(filepath.Join(t.TempDir(), FileName), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := st.Async(16)
	defer w.Close()
	for _, b := range []struct {
		conv string
		turn int
	}{{"a", 1}, {"a", 1}, {"b", 1}, {"a", 1}, {"a", 2}, {"a", 2}} {
		w.BeginTurn(b.conv, b.turn)
	}
	w.bmu.Lock()
	n := w.queuedB
	w.bmu.Unlock()
	if n != 3 {
		t.Fatalf("%d BeginTurns queued, want 3 (a1, b1, a2)", n)
	}
}

// TestWriterPutsAnEntryOnce: the blocks an agent re-sends with every step
// of a turn are queued once; a new text, a new turn, another conversation
// and an entry that was dropped (queue full) are queued again, and every
// one ends up stored.
func TestWriterPutsAnEntryOnce(t *testing.T) {
	s, w, release := stalledWriter(t, 4)
	defer release()

	w.Put([]Entry{entry("a", 1, "x", "o"), entry("a", 1, "y", "o")})
	w.Put([]Entry{entry("a", 1, "x", "o"), entry("a", 1, "y", "o")}) // the next step of the turn
	if got := len(w.ops); got != 1 {
		t.Fatalf("queue: %d operations after the same entries twice, want 1", got)
	}
	w.Put([]Entry{entry("a", 1, "x", "o"), entry("a", 1, "z", "o"), entry("b", 1, "x", "o")})
	if got := len(w.ops); got != 2 {
		t.Fatalf("queue: %d operations, want 2 (the new z and b's x)", got)
	}
	w.Put([]Entry{entry("a", 1, "x", "another original")}) // a second original of one shaped text: kept too
	if got := len(w.ops); got != 3 {
		t.Fatalf("queue: %d operations, want 3 (x's second original)", got)
	}
	w.Put([]Entry{entry("c", 1, "full0", "o")})
	w.Put([]Entry{entry("c", 1, "lost", "o")}) // queue full: dropped, so not remembered
	if got := w.Dropped(); got != 1 {
		t.Fatalf("Dropped: %d, want 1", got)
	}
	release()
	w.Flush()
	w.Put([]Entry{entry("c", 1, "lost", "o")}) // sent again once there is room: queued
	w.BeginTurn("a", 2)
	w.Put([]Entry{entry("a", 2, "x", "o")}) // the same text in a new turn
	w.Flush()
	want := []string{"a/2/x", "b/1/x", "c/1/full0", "c/1/lost", "stall/1/stall"}
	if got := listKeys(t, s, ""); !slices.Equal(got, want) {
		t.Errorf("stored: got %q, want %q", got, want)
	}
}

// TestWriterPausedTurnOutlivesPurge: a turn that pauses past the table's
// TTL has its entries purged; when the agent goes on and re-sends the
// turn's blocks, they are stored again (the Writer's memo of what it
// queued lasts half the TTL), not skipped as already queued.
func TestWriterPausedTurnOutlivesPurge(t *testing.T) {
	c := testenv.NewClock()
	s := openTest(t, Options{Now: c.Now, TTL: time.Hour})
	w := s.Async(16)
	defer w.Close()
	w.put.now = c.Now
	e := entry("a", 1, "decided: read the config", "o")
	w.Put([]Entry{e})
	w.Flush()
	c.Add(2 * time.Hour)
	if n, err := s.Purge(c.Now()); err != nil || n != 1 {
		t.Fatalf("Purge: %d, %v; want the idle conversation removed", n, err)
	}
	w.Put([]Entry{e}) // the turn goes on
	w.Flush()
	if got := listKeys(t, s, "a"); !slices.Equal(got, []string{"a/1/decided: read the config"}) {
		t.Fatalf("stored after the pause: %q", got)
	}
}

// TestWriterBoundsQueuedBytes: the entries waiting for the writer are
// bounded in bytes as well as in number (an original is as long as a
// model's reasoning), their texts are copies (a queued entry does not keep
// the request body it came from alive), and the count is given back once
// they are written.
func TestWriterBoundsQueuedBytes(t *testing.T) {
	defer func(n int64) { maxQueuedBytes = n }(maxQueuedBytes)
	maxQueuedBytes = 10 << 10
	_, w, release := stalledWriter(t, 64)
	defer release()

	body := []byte(strings.Repeat("r", 6<<10) + strings.Repeat("s", 6<<10))
	orig := func(i int) string { return unsafe.String(&body[i*(6<<10)], 6<<10) } // strings of a "body"
	w.Put([]Entry{entry("a", 1, "kept", orig(0))})
	w.Put([]Entry{entry("a", 1, "lost", orig(1))}) // 12 KB queued: over the bound
	if got := w.Dropped(); got != 1 {
		t.Fatalf("Dropped: got %d, want the second entry", got)
	}
	op := <-w.ops // the queued one (the writer is stalled)
	if e := op.entries[0]; unsafe.StringData(e.Original) == &body[0] || e.Original != orig(0) {
		t.Fatal("the queued original shares the body's memory, or changed")
	}
	w.ops <- op
	release()
	w.Flush()
	if got := w.queuedBytes.Load(); got != 0 {
		t.Fatalf("%d bytes still counted after the flush", got)
	}
}
