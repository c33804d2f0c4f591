package capture

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"testing"
	"time"
)

// workload is a prepared stream of records: agent calls whose request
// bodies re-send a growing history (~200 KB), each followed by its SSE
// events (~300 bytes each) and an end record.
type workload struct {
	records []Record
	raw     int64
}

func agentWorkload(calls, eventsPerCall int, seed uint64) *workload {
	conv := newConversation(seed)
	for i := range 100 {
		conv.next(i) // start with a history of ~150 KB
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	wl := &workload{}
	add := func(r Record) {
		wl.records = append(wl.records, r)
		wl.raw += int64(len(r.Data))
	}
	for c := range calls {
		call := fmt.Sprintf("call-%06d", c)
		add(Record{Kind: KindRequest, Call: call, Route: "deepseek", Model: "deepseek-reasoner", Stream: true,
			Header: testHeader(), Data: conv.next(100 + c)})
		add(Record{Kind: KindResponse, Call: call, Status: 200})
		for j := range eventsPerCall {
			add(Record{Kind: KindEvent, Call: call, Seq: j, Offset: time.Duration(j) * 20 * time.Millisecond, Data: sseEvent(rng, call)})
		}
		add(Record{Kind: KindEnd, Call: call, Outcome: "complete", Events: eventsPerCall})
	}
	return wl
}

// feed enqueues every record, waiting when the queue is full (a benchmark
// measures the writer, not the drops).
func (wl *workload) feed(w *Writer) {
	for _, r := range wl.records {
		for !w.Enqueue(r) {
			runtime.Gosched()
		}
	}
}

// BenchmarkWriter measures the writer goroutine's throughput in raw bytes
// (requests counted whole, as on the wire). Each iteration writes one
// batch and flushes it.
func BenchmarkWriter(b *testing.B) {
	for _, bc := range []struct {
		name          string
		calls, events int
	}{
		{"agent", 100, 300},  // ~200 KB request + 300 events per call
		{"events", 10, 5000}, // mostly 300-byte events
	} {
		b.Run(bc.name, func(b *testing.B) {
			wl := agentWorkload(bc.calls, bc.events, 1)
			w, _ := openTest(b, Options{QueueSize: 1 << 15, QueueBytes: 1 << 30})
			b.SetBytes(wl.raw)
			b.ResetTimer()
			for range b.N {
				wl.feed(w)
				if err := w.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			st := w.Stats()
			b.ReportMetric(100*float64(st.BytesOnDisk)/float64(st.BytesRaw), "%disk/raw")
		})
	}
}

// BenchmarkTail reads the last 100 records, and the last 5 requests
// (rebuilt), from logs of two sizes with a fresh Reader each time: the
// time must not grow with the log. SHAPERPROXY_BIG_BENCH=1 makes the large
// log 2 GB raw instead of 400 MB.
func BenchmarkTail(b *testing.B) {
	sizes := []int64{20 << 20, 400 << 20}
	if os.Getenv("SHAPERPROXY_BIG_BENCH") == "1" {
		sizes[1] = 2 << 30
	}
	for _, size := range sizes {
		dir, st := buildLog(b, size)
		name := fmt.Sprintf("raw=%dMB", size>>20)
		b.Run(name+"/last100", func(b *testing.B) {
			benchTail(b, dir, 100, Filter{}, st)
		})
		b.Run(name+"/last5requests", func(b *testing.B) {
			benchTail(b, dir, 5, Filter{Kinds: []Kind{KindRequest}}, st)
		})
	}
}

func benchTail(b *testing.B, dir string, n int, f Filter, st WriterStats) {
	for b.Loop() {
		r, err := OpenReader(dir)
		if err != nil {
			b.Fatal(err)
		}
		got, err := r.Tail(n, f)
		if err != nil || len(got) != n {
			b.Fatalf("Tail: %d records, %v", len(got), err)
		}
		for _, l := range got {
			if l.Err != nil {
				b.Fatal(l.Err)
			}
		}
		r.Close()
	}
	b.ReportMetric(float64(st.BytesOnDisk)/(1<<20), "MB-on-disk")
}

// buildLog writes a log of about size raw bytes (agent calls with many
// events, so the log is large on disk too).
func buildLog(b *testing.B, size int64) (string, WriterStats) {
	b.Helper()
	wl := agentWorkload(20, 2000, 2)
	w, dir := openTest(b, Options{QueueSize: 1 << 15, QueueBytes: 1 << 30, RetainBytes: -1})
	for w.Stats().Enqueued == 0 || w.Stats().BytesRaw < size {
		wl.feed(w)
		if err := w.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	st := w.Stats()
	b.Logf("log of %.0f MB raw, %.1f MB on disk, %d segments", float64(st.BytesRaw)/1e6, float64(st.BytesOnDisk)/1e6, st.Segments)
	return dir, st
}
