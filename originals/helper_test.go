package originals

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

// openTest opens a Store on a fresh file under t.TempDir and, when the test
// ends, closes it and checks the file's consistency.
func openTest(tb testing.TB, opts Options) *Store {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "data", FileName)
	s, err := Open(path, opts)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			tb.Errorf("close: %v", err)
		}
		checkFile(tb, path)
	})
	return s
}

// checkFile opens the table at path read-only and runs Check.
func checkFile(tb testing.TB, path string) {
	tb.Helper()
	s, err := Open(path, Options{ReadOnly: true, LockTimeout: time.Second})
	if err != nil {
		tb.Errorf("check: %v", err)
		return
	}
	defer s.Close()
	if err := s.Check(); err != nil {
		tb.Errorf("check %s: %v", path, err)
	}
}

func entry(conv string, turn int, shaped, original string) Entry {
	return Entry{Shaped: shaped, Original: original, Conversation: conv, Turn: turn}
}

// text returns n bytes of reasoning-like text seeded by seed.
func text(seed uint64, n int) string {
	words := []string{"the", "user", "wants", "check", "file", "so", "I", "should", "call", "tool", "first", "then", "answer", "because", "config"}
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, 0, n+16)
	for len(b) < n {
		b = append(b, words[r.IntN(len(words))]...)
		b = append(b, ' ')
	}
	return string(b[:n])
}

func mustPut(tb testing.TB, s *Store, entries ...Entry) {
	tb.Helper()
	if err := s.Put(entries); err != nil {
		tb.Fatal(err)
	}
}

func mustStats(tb testing.TB, s *Store) Stats {
	tb.Helper()
	st, err := s.Stats()
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

// listKeys returns "conversation/turn/shaped" for every entry, sorted.
func listKeys(tb testing.TB, s *Store, conv string) []string {
	tb.Helper()
	entries, err := s.List(conv)
	if err != nil {
		tb.Fatal(err)
	}
	var keys []string
	for _, e := range entries {
		keys = append(keys, fmt.Sprintf("%s/%d/%s", e.Conversation, e.Turn, e.Shaped))
	}
	sort.Strings(keys)
	return keys
}

// percentile returns the q-quantile of d (sorted in place).
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(q*float64(len(d)-1))]
}
