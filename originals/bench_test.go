package originals

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// benchEntry is the i-th entry of a benchmark: a ~200-byte shaped text and a
// unique 2 KB original.
func benchEntry(i, turn int) Entry {
	shaped := fmt.Sprintf("decided #%d: read the config first, then call the tool; %s", i, text(uint64(i%32), 140))
	return entry("bench", turn, shaped, text(uint64(i%64), 2040)+fmt.Sprintf("%08d", i))
}

// BenchmarkPut measures a synchronous Put of one 2 KB original (one
// transaction, fsynced), with a new turn every 25 Puts. p50-us and p99-us
// are per-Put latencies.
func BenchmarkPut(b *testing.B) {
	s := openTest(b, Options{})
	lat := make([]time.Duration, 0, b.N)
	b.SetBytes(2048)
	for i := range b.N {
		if i%25 == 0 {
			if err := s.BeginTurn("bench", i/25); err != nil {
				b.Fatal(err)
			}
		}
		e := []Entry{benchEntry(i, i/25)}
		start := time.Now()
		if err := s.Put(e); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.ReportMetric(float64(percentile(lat, 0.50))/1e3, "p50-us")
	b.ReportMetric(float64(percentile(lat, 0.99))/1e3, "p99-us")
	b.ReportMetric(float64(percentile(lat, 1))/1e3, "max-us")
}

// BenchmarkWriterPut measures the request path with the async Writer: the
// time Put takes to queue one 2 KB original. The benchmark queues far faster
// than a disk commits, so the queue (1024) fills and most entries are
// dropped (dropped/op); the latency is that of the non-blocking enqueue or
// drop, which is what a request waits for.
func BenchmarkWriterPut(b *testing.B) {
	s := openTest(b, Options{})
	w := s.Async(1024)
	entries := make([][]Entry, 256)
	for i := range entries {
		entries[i] = []Entry{benchEntry(i, 0)}
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		w.Put(entries[i%len(entries)])
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	w.Close()
	b.ReportMetric(float64(percentile(lat, 0.50)), "p50-ns")
	b.ReportMetric(float64(percentile(lat, 0.99)), "p99-ns")
	b.ReportMetric(float64(w.Dropped())/float64(b.N), "dropped/op")
}

// BenchmarkWriterPutPaced queues one Put every millisecond (1,000 requests
// a second, far more than an agent makes) and measures the enqueue latency
// while the writer commits in the background. Drops happen only if the disk
// stalls for longer than the queue (1024 Puts, about a second) lasts. It
// also reports the writer's commits per Put.
func BenchmarkWriterPutPaced(b *testing.B) {
	b.Run("paced", func(b *testing.B) { benchWriterPutPaced(b, commitEvery) })
	b.Run("unpaced", func(b *testing.B) { benchWriterPutPaced(b, 0) }) // a commit as the Puts come, as before the writer paused
}

func benchWriterPutPaced(b *testing.B, every time.Duration) {
	defer func(d time.Duration) { commitEvery = d }(commitEvery)
	commitEvery = every
	s := openTest(b, Options{})
	w := s.Async(1024)
	lat := make([]time.Duration, 0, b.N)
	next := time.Now()
	for i := range b.N {
		if i%25 == 0 {
			w.BeginTurn("bench", i/25)
		}
		e := []Entry{benchEntry(i, i/25)}
		for time.Now().Before(next) {
		}
		next = next.Add(time.Millisecond)
		start := time.Now()
		w.Put(e)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	w.Close()
	b.ReportMetric(float64(percentile(lat, 0.50)), "p50-ns")
	b.ReportMetric(float64(percentile(lat, 0.99)), "p99-ns")
	b.ReportMetric(float64(w.Dropped()), "dropped")
	b.ReportMetric(float64(w.commits.Load())/float64(b.N), "commits/op")
}

type simResult struct {
	peak, peakFirstHalf, final int64 // file sizes
	peakLive                   int64 // most original bytes held at once
	entries                    int   // at the end
}

// simulateLongConversation runs a conversation of turns turns through a
// Writer, as the proxy does: each turn starts with BeginTurn and has blocks
// reasoning blocks of 2–10 KB, shaped over 5 steps (each step's request
// puts every block shaped so far; repeats are no-ops). It records the file
// size after every turn.
func simulateLongConversation(tb testing.TB, s *Store, turns, blocks int) simResult {
	tb.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	w := s.Async(1024)
	var res simResult
	for turn := 1; turn <= turns; turn++ {
		w.BeginTurn("long", turn)
		var entries []Entry
		for b := range blocks {
			n := 2048 + r.IntN(8*1024+1)
			entries = append(entries, entry("long", turn, fmt.Sprintf("turn %d block %d: decided to check the file", turn, b), text(r.Uint64(), n)))
		}
		for step := 1; step <= 5; step++ {
			w.Put(entries[:len(entries)*step/5])
			w.Flush()
		}
		st := mustStats(tb, s)
		res.peak = max(res.peak, st.FileSize)
		res.peakLive = max(res.peakLive, st.Bytes)
		if turn <= turns/2 {
			res.peakFirstHalf = res.peak
		}
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	if w.Dropped() > 0 {
		tb.Fatalf("the writer dropped %d entries", w.Dropped())
	}
	st := mustStats(tb, s)
	res.final, res.entries = st.FileSize, st.Entries
	return res
}

// TestLongConversationBounded: 200 turns of ~25 blocks of 2–10 KB; the file
// must stay about the size of one turn and must not grow in the second half.
func TestLongConversationBounded(t *testing.T) {
	turns := 200
	if testing.Short() {
		turns = 40
	}
	s := openTest(t, Options{})
	res := simulateLongConversation(t, s, turns, 25)
	t.Logf("%d turns: peak file %d bytes (first half %d), final %d, most original bytes at once %d, entries at end %d",
		turns, res.peak, res.peakFirstHalf, res.final, res.peakLive, res.entries)
	if res.entries != 25 {
		t.Errorf("entries at the end: %d, want the last turn's 25", res.entries)
	}
	if res.peak > res.peakFirstHalf {
		t.Errorf("the file grew in the second half: peak %d, first half %d", res.peak, res.peakFirstHalf)
	}
	if res.peak > 2<<20 {
		t.Errorf("peak file %d bytes, want under 2 MiB for turns of at most %d original bytes", res.peak, res.peakLive)
	}
}

// BenchmarkLongConversation reports the peak file size of the 200-turn
// simulation (peak-bytes) and the most original text held at once.
func BenchmarkLongConversation(b *testing.B) {
	for range b.N {
		s := openTest(b, Options{})
		res := simulateLongConversation(b, s, 200, 25)
		b.ReportMetric(float64(res.peak), "peak-bytes")
		b.ReportMetric(float64(res.final), "final-bytes")
		b.ReportMetric(float64(res.peakLive), "live-bytes")
	}
}

// BenchmarkWriterPutRepeated is an agent's tool loop as the Writer sees
// it: each request re-sends the turn's 200 shaped blocks (one
// conversation, one turn), all queued before; Put only finds them
// already queued (putMemo.admit), which is what a request waits for.
func BenchmarkWriterPutRepeated(b *testing.B) {
	s := openTest(b, Options{})
	w := s.Async(1024)
	batch := make([]Entry, 200)
	for i := range batch {
		batch[i] = benchEntry(i, 0)
	}
	w.Put(batch)
	w.Flush()
	b.ResetTimer()
	for b.Loop() {
		w.Put(batch)
	}
	b.StopTimer()
	if n := w.Dropped(); n != 0 {
		b.Fatalf("%d entries dropped", n)
	}
	w.Close()
}
