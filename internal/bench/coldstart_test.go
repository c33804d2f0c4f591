package bench

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// BenchmarkColdStart measures what the cost section's latency workloads
// do to the proxy's own structures between two requests: a walk of 1,000
// nodes of 64 bytes linked in random order (each read waits for the one
// before, as a walk of a view, a map or a carry does), timed after what
// comes between two requests: nothing, a 1 MB write (about what a large
// body moves through the caches), a sleep of 1, 5 or 50 ms (the latency
// workloads' pace is 20 to 500 requests a second, with other processes
// running meanwhile), and a walk once after the 50 ms followed by a 1 MB
// or a 4 MB write (a warm-up at a body's first bytes). It reports the
// median walk in µs (walk-µs); internal/bench/HISTORY.md, Session BI:
//
//	go test -run='^$' -bench=ColdStart -benchtime=40x ./internal/bench
func BenchmarkColdStart(b *testing.B) {
	type node struct {
		next *node
		_    [7]uint64 // a node a cache line
	}
	const n = 4096 // 256 KiB of nodes
	nodes := make([]node, n)
	perm := rand.Perm(n)
	for i := range perm {
		nodes[perm[i]].next = &nodes[perm[(i+1)%n]]
	}
	walk := func() *node {
		h := &nodes[0]
		for range 1000 {
			h = h.next
		}
		return h
	}
	buf := make([]byte, 4<<20)
	write := func(size int) {
		for i := range buf[:size] {
			buf[i]++
		}
	}
	for _, c := range []struct {
		name    string
		between func()
	}{
		{"back-to-back", func() {}},
		{"after-1MB-write", func() { write(1 << 20) }},
		{"after-1ms-sleep", func() { time.Sleep(time.Millisecond) }},
		{"after-5ms-sleep", func() { time.Sleep(5 * time.Millisecond) }},
		{"after-50ms-sleep", func() { time.Sleep(50 * time.Millisecond) }},
		{"warmed-after-50ms-then-1MB-write", func() { time.Sleep(50 * time.Millisecond); walk(); write(1 << 20) }},
		{"warmed-after-50ms-then-4MB-write", func() { time.Sleep(50 * time.Millisecond); walk(); write(4 << 20) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			var ds []time.Duration
			var sink *node
			for b.Loop() {
				b.StopTimer()
				walk()
				c.between()
				b.StartTimer()
				t0 := time.Now()
				sink = walk()
				ds = append(ds, time.Since(t0))
			}
			if sink == nil {
				b.Fatal("the walk ended nowhere")
			}
			slices.Sort(ds)
			b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds())/1e3, "walk-µs")
		})
	}
}
