//go:build unix

package bigbuf

import (
	"syscall"
	"testing"
	"time"
)

// BenchmarkFirstTouch measures what a page of memory fresh from the
// system costs the first time it is written (a page fault), against a
// second write: what a buffer made fresh, instead of taken from the free
// list, pays per 4 KiB on top of its clearing. 64 MiB mapped per round.
func BenchmarkFirstTouch(b *testing.B) {
	const size, page = 64 << 20, 4096
	var first, second time.Duration
	for b.Loop() {
		m, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for i := 0; i < size; i += page {
			m[i] = 1
		}
		mid := time.Now()
		for i := 0; i < size; i += page {
			m[i] = 2
		}
		first, second = first+mid.Sub(start), second+time.Since(mid)
		if err := syscall.Munmap(m); err != nil {
			b.Fatal(err)
		}
	}
	pages := float64(b.N) * size / page
	b.ReportMetric(float64(first.Nanoseconds())/pages/1e3, "µs/page-first-write")
	b.ReportMetric(float64(second.Nanoseconds())/pages/1e3, "µs/page-second-write")
}
