package originals

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
	bolt "go.etcd.io/bbolt"
)

func TestPutLookup(t *testing.T) {
	c := testenv.NewClock()
	s := openTest(t, Options{Now: c.Now})
	want := entry("conv-a", 3, "decided: read config first", text(1, 2048))
	mustPut(t, s, want)

	got, err := s.Lookup(want.Shaped)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("Lookup: got %d entries, want 1", len(got))
	}
	g := got[0]
	if g.Shaped != want.Shaped || g.Original != want.Original || g.Conversation != want.Conversation || g.Turn != want.Turn {
		t.Errorf("Lookup: got %+v, want %+v", g, want)
	}
	if !g.Time.Equal(c.Now()) {
		t.Errorf("Time: got %v, want the clock's %v", g.Time, c.Now())
	}
	byHash, err := s.LookupHash(sha256.Sum256([]byte(want.Shaped)))
	if err != nil || len(byHash) != 1 || byHash[0].Original != want.Original {
		t.Errorf("LookupHash: got %d entries, %v", len(byHash), err)
	}
	miss, err := s.Lookup("decided: read config first ")
	if err != nil || len(miss) != 0 {
		t.Errorf("Lookup of other text: got %d entries, %v; want none", len(miss), err)
	}
}

func TestPutKeepsGivenTime(t *testing.T) {
	s := openTest(t, Options{})
	e := entry("c", 0, "s", "o")
	e.Time = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	mustPut(t, s, e)
	got, _ := s.Lookup("s")
	if len(got) != 1 || !got[0].Time.Equal(e.Time) {
		t.Fatalf("got %+v, want time %v", got, e.Time)
	}
}

func TestFanOut(t *testing.T) {
	s := openTest(t, Options{})
	mustPut(t, s,
		entry("a", 1, "same extract", "first original"),
		entry("a", 1, "same extract", "second original"))
	mustPut(t, s, entry("b", 1, "same extract", "third original"))

	got, err := s.Lookup("same extract")
	if err != nil {
		t.Fatal(err)
	}
	var originals []string
	for _, e := range got {
		originals = append(originals, e.Original)
	}
	slices.Sort(originals)
	if want := []string{"first original", "second original", "third original"}; !slices.Equal(originals, want) {
		t.Errorf("originals: got %q, want %q", originals, want)
	}
	st := mustStats(t, s)
	if st.Entries != 3 || st.FanOuts != 1 || st.MaxFanOut != 3 || st.Conversations != 2 {
		t.Errorf("stats: got %+v, want 3 entries, 1 fan-out of 3, 2 conversations", st)
	}
}

func TestSamePairOnce(t *testing.T) {
	s := openTest(t, Options{})
	e := entry("a", 1, "extract", text(2, 3000))
	mustPut(t, s, e, e)
	mustPut(t, s, e)
	st := mustStats(t, s)
	if st.Entries != 1 || st.Bytes != 3000 || st.MaxFanOut != 1 || st.FanOuts != 0 {
		t.Errorf("stats after the same pair three times: got %+v, want 1 entry of 3000 bytes", st)
	}

	// The same pair in another conversation belongs to that conversation.
	mustPut(t, s, entry("b", 1, e.Shaped, e.Original))
	st = mustStats(t, s)
	if st.Entries != 2 || st.FanOuts != 0 || st.MaxFanOut != 1 {
		t.Errorf("stats with the pair in two conversations: got %+v, want 2 entries, no fan-out", st)
	}
}

func TestPairMovesToLaterTurn(t *testing.T) {
	s := openTest(t, Options{})
	mustPut(t, s, entry("a", 1, "x", "orig"))
	mustPut(t, s, entry("a", 2, "x", "orig"))
	mustPut(t, s, entry("a", 1, "x", "orig")) // older again: no-op
	if got, want := listKeys(t, s, "a"), []string{"a/2/x"}; !slices.Equal(got, want) {
		t.Fatalf("after re-put in turn 2: got %q, want %q", got, want)
	}
	if err := s.BeginTurn("a", 2); err != nil {
		t.Fatal(err)
	}
	if got, want := listKeys(t, s, "a"), []string{"a/2/x"}; !slices.Equal(got, want) {
		t.Errorf("after BeginTurn(2): got %q, want %q", got, want)
	}
}

func TestBeginTurnClearsOnlyItsConversation(t *testing.T) {
	s := openTest(t, Options{})
	mustPut(t, s, entry("a", 1, "a1", "o"), entry("a", 2, "a2", "o"), entry("a", 3, "a3", "o"))
	mustPut(t, s, entry("b", 1, "b1", "o"))
	if err := s.BeginTurn("a", 3); err != nil {
		t.Fatal(err)
	}
	if got, want := listKeys(t, s, ""), []string{"a/3/a3", "b/1/b1"}; !slices.Equal(got, want) {
		t.Errorf("after BeginTurn(a, 3): got %q, want %q", got, want)
	}
	for _, shaped := range []string{"a1", "a2"} {
		if got, _ := s.Lookup(shaped); len(got) != 0 {
			t.Errorf("Lookup(%q) after its turn was cleared: got %d entries", shaped, len(got))
		}
	}
}

func TestBeginTurnWhileAnotherConversationWrites(t *testing.T) {
	s := openTest(t, Options{})
	const n = 40
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := range n {
			if err := s.Put([]Entry{entry("b", 1, fmt.Sprintf("b%d", i), "o")}); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Go(func() {
		for turn := 1; turn <= n; turn++ {
			if err := s.BeginTurn("a", turn); err != nil {
				t.Error(err)
			}
			if err := s.Put([]Entry{entry("a", turn, fmt.Sprintf("a%d", turn), "o")}); err != nil {
				t.Error(err)
			}
		}
	})
	wg.Wait()
	if got := len(listKeys(t, s, "b")); got != n {
		t.Errorf("conversation b: got %d entries, want all %d", got, n)
	}
	if got, want := listKeys(t, s, "a"), []string{fmt.Sprintf("a/%d/a%d", n, n)}; !slices.Equal(got, want) {
		t.Errorf("conversation a: got %q, want only its last turn %q", got, want)
	}
}

func TestPutOfEarlierTurnIgnored(t *testing.T) {
	s := openTest(t, Options{})
	if err := s.BeginTurn("a", 5); err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, entry("a", 4, "late", "o"), entry("a", 5, "now", "o"))
	if got, want := listKeys(t, s, "a"), []string{"a/5/now"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestPurgeTTL(t *testing.T) {
	c := testenv.NewClock()
	s := openTest(t, Options{TTL: time.Hour, Now: c.Now})
	mustPut(t, s, entry("old", 1, "shared", "o1"), entry("old", 1, "x", "o"))
	c.Add(50 * time.Minute)
	mustPut(t, s, entry("new", 1, "shared", "o2"))
	if err := s.BeginTurn("new", 1); err != nil {
		t.Fatal(err)
	}

	n, err := s.Purge(c.Now()) // "old" idle 50m: kept
	if err != nil || n != 0 {
		t.Fatalf("Purge at 50m: removed %d, %v; want 0", n, err)
	}
	c.Add(20 * time.Minute)
	n, err = s.Purge(c.Now())
	if err != nil || n != 1 {
		t.Fatalf("Purge at 70m: removed %d, %v; want 1", n, err)
	}
	if got, want := listKeys(t, s, ""), []string{"new/1/shared"}; !slices.Equal(got, want) {
		t.Errorf("after purge: got %q, want %q", got, want)
	}
	if st := mustStats(t, s); st.Conversations != 1 || st.Entries != 1 {
		t.Errorf("stats after purge: got %+v", st)
	}
}

func TestFileMode(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "shaperproxy")
	path := filepath.Join(dir, FileName)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, s, entry("a", 1, "s", "o"))
	s.Close()
	for p, want := range map[string]fs.FileMode{path: 0o600, dir: 0o700} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}

	// A table left with a wider mode is tightened on open.
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("after reopening a 0644 table: mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestReadOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	if _, err := Open(path, Options{ReadOnly: true}); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("read-only open of a missing table: got %v, want ErrNotExist", err)
	}
	w, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, w, entry("a", 1, "s", "o"))

	start := time.Now()
	_, err = Open(path, Options{ReadOnly: true, LockTimeout: 200 * time.Millisecond})
	if !errors.Is(err, ErrLocked) {
		t.Errorf("read-only open while a writer has the table: got %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("ErrLocked after %v, want about the 200ms timeout", d)
	}
	w.Close()

	r, err := Open(path, Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if got, err := r.Lookup("s"); err != nil || len(got) != 1 {
		t.Errorf("read-only Lookup: got %d entries, %v", len(got), err)
	}
	if err := r.Put([]Entry{entry("a", 1, "t", "o")}); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Put: got %v, want ErrReadOnly", err)
	}
	if err := r.Compact(); !errors.Is(err, ErrReadOnly) {
		t.Errorf("read-only Compact: got %v, want ErrReadOnly", err)
	}
}

func TestInvalid(t *testing.T) {
	s := openTest(t, Options{})
	long := string(make([]byte, MaxConversationLen+1))
	for _, e := range []Entry{entry("", 1, "s", "o"), entry("a", -1, "s", "o"), entry(long, 1, "s", "o")} {
		if err := s.Put([]Entry{entry("ok", 1, "s", "o"), e}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(%.20q, turn %d): got %v, want ErrInvalid", e.Conversation, e.Turn, err)
		}
	}
	if err := s.BeginTurn("", 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("BeginTurn(\"\"): got %v, want ErrInvalid", err)
	}
	if st := mustStats(t, s); st.Entries != 0 {
		t.Errorf("an invalid Put wrote %d entries, want none", st.Entries)
	}
}

func TestClosed(t *testing.T) {
	s := openTest(t, Options{})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Put([]Entry{entry("a", 1, "s", "o")}); !errors.Is(err, ErrClosed) {
		t.Errorf("Put after Close: %v", err)
	}
	if _, err := s.Lookup("s"); !errors.Is(err, ErrClosed) {
		t.Errorf("Lookup after Close: %v", err)
	}
	if err := s.Compact(); !errors.Is(err, ErrClosed) {
		t.Errorf("Compact after Close: %v", err)
	}
}

func TestCheckFindsBrokenIndex(t *testing.T) {
	s := openTest(t, Options{})
	mustPut(t, s, entry("a", 1, "s", "o"))
	// Break the index by hand; Check must notice, then repair for Cleanup.
	hs, ho := hashOf("s"), hashOf("o")
	if err := s.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketHash).Delete(indexKey(hs, ho, "a")) }); err != nil {
		t.Fatal(err)
	}
	if err := s.Check(); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Check with an entry missing from the index: got %v, want ErrCorrupt", err)
	}
	if _, err := s.Purge(time.Now().Add(100 * DefaultTTL)); err != nil {
		t.Fatal(err)
	}
}
