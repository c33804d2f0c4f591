package originals

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/boltdb"
	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

func fileSize(tb testing.TB, path string) int64 {
	tb.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		tb.Fatal(err)
	}
	return fi.Size()
}

// fill puts n entries of size bytes into conv at turn, in batches.
func fill(tb testing.TB, s *Store, conv string, turn, n, size int) {
	tb.Helper()
	for i := 0; i < n; i += 50 {
		var batch []Entry
		for j := i; j < min(n, i+50); j++ {
			batch = append(batch, entry(conv, turn, fmt.Sprintf("%s-%d-%d", conv, turn, j), text(uint64(j), size)))
		}
		mustPut(tb, s, batch...)
	}
}

func TestCompactShrinksAndKeepsEntries(t *testing.T) {
	s := openTest(t, Options{MaxBytes: -1})
	fill(t, s, "big", 1, 1500, 4096) // ~6 MB
	fill(t, s, "small", 1, 20, 2048)
	if err := s.BeginTurn("big", 2); err != nil { // frees almost everything
		t.Fatal(err)
	}
	before := fileSize(t, s.Path())
	keys := listKeys(t, s, "")

	if err := s.Compact(); err != nil {
		t.Fatal(err)
	}
	after := fileSize(t, s.Path())
	t.Logf("file %d -> %d bytes", before, after)
	if after*4 > before {
		t.Errorf("Compact: file %d -> %d bytes, want at least 4x smaller", before, after)
	}
	if got := listKeys(t, s, ""); !slices.Equal(got, keys) {
		t.Errorf("Compact changed the entries: %d before, %d after", len(keys), len(got))
	}
	if _, err := os.Stat(s.Path() + boltdb.CompactSuffix); !os.IsNotExist(err) {
		t.Errorf("temporary file left behind: %v", err)
	}

	// The Store goes on with the new file.
	mustPut(t, s, entry("small", 1, "after", "compaction"))
	if got, _ := s.Lookup("after"); len(got) != 1 {
		t.Errorf("Lookup after Compact: got %d entries, want 1", len(got))
	}
	if err := s.Compact(); err != nil {
		t.Errorf("second Compact: %v", err)
	}
	if got := len(listKeys(t, s, "")); got != len(keys)+1 {
		t.Errorf("after second Compact: %d entries, want %d", got, len(keys)+1)
	}
}

// grown returns a Store with opts whose file was filled by fn without a
// bound: a table made by a version, or a configuration, with a larger
// MaxBytes (a write never grows the file past MaxBytes).
func grown(t *testing.T, opts Options, fn func(*Store)) *Store {
	t.Helper()
	first := openTest(t, Options{MaxBytes: -1, Now: opts.Now})
	fn(first)
	path := first.Path()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestCompactIfLarge(t *testing.T) {
	s := grown(t, Options{MaxBytes: 1 << 20}, func(s *Store) { fill(t, s, "a", 1, 600, 4096) })
	if _, err := s.compactIfLarge(); err != nil { // may compact the pages freed while filling
		t.Fatal(err)
	}
	if did, err := s.compactIfLarge(); err != nil || did {
		t.Fatalf("compactIfLarge again with the file full of live data: %v, %v; want no compaction", did, err)
	}
	if err := s.BeginTurn("a", 2); err != nil {
		t.Fatal(err)
	}
	before := fileSize(t, s.Path())
	if err := s.BeginTurn("a", 3); err != nil {
		t.Fatal(err)
	}
	if did, err := s.compactIfLarge(); err != nil || !did {
		t.Fatalf("compactIfLarge with a %d-byte file of free pages: %v, %v; want a compaction", before, did, err)
	}
	if after := fileSize(t, s.Path()); after > 1<<20 {
		t.Errorf("after compaction: %d bytes, want under MaxBytes", after)
	}
	if did, _ := s.compactIfLarge(); did {
		t.Error("compactIfLarge compacted a small file again")
	}
}

func TestMaintainPurgesAndCompacts(t *testing.T) {
	c := testenv.NewClock()
	s := grown(t, Options{TTL: time.Hour, MaxBytes: 256 << 10, Now: c.Now}, func(s *Store) {
		fill(t, s, "idle", 1, 300, 4096)
		mustPut(t, s, entry("live", 1, "s", "o"))
	})
	c.Add(2 * time.Hour)
	if err := s.BeginTurn("live", 1); err != nil {
		t.Fatal(err)
	}
	big := fileSize(t, s.Path())

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { s.Maintain(ctx, time.Millisecond); close(done) }()
	deadline := time.Now().Add(10 * time.Second)
	for fileSize(t, s.Path()) >= big && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if got, want := listKeys(t, s, ""), []string{"live/1/s"}; !slices.Equal(got, want) {
		t.Errorf("after Maintain: got %q, want %q", got, want)
	}
	if size := fileSize(t, s.Path()); size >= big {
		t.Errorf("Maintain did not compact: %d bytes, was %d", size, big)
	}
}
