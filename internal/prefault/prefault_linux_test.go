package prefault

import (
	"bytes"
	"syscall"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// minorFaults is the process's page faults served without a disk so far.
func minorFaults(t testing.TB) int64 {
	t.Helper()
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		t.Fatal(err)
	}
	return r.Minflt
}

// fresh maps n bytes of memory never touched, unmapped at the test's end.
func fresh(t testing.TB, n int) []byte {
	t.Helper()
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Munmap(m) })
	return m
}

// writes writes a byte to each page of b and returns the page faults it
// took.
func writes(t testing.TB, b []byte) int64 {
	f := minorFaults(t)
	for i := 0; i < len(b); i += page {
		b[i] = 7
	}
	return minorFaults(t) - f
}

func noRace(t *testing.T) {
	if testenv.Race {
		t.Skip("the race detector's shadow memory takes page faults of its own")
	}
}

// TestFreshTakesTheFaultsOffTheWrites is what the package is for: memory
// never touched takes a fault on each page's first write, and none after
// Fresh, which faulted it in at once.
func TestFreshTakesTheFaultsOffTheWrites(t *testing.T) {
	noRace(t)
	const n = 4 << 20
	pages := int64(n / page)
	if f := writes(t, fresh(t, n)); f < pages/2 {
		t.Skipf("%d page faults for %d pages of fresh memory: this system does not fault on each page's first write (huge pages?)", f, pages)
	}
	b := fresh(t, n)[100 : n-100] // ends inside pages: written, not populated
	if !Fresh(b) {
		t.Skip("this kernel cannot populate a range (Linux before 5.14): Fresh writes the pages")
	}
	if f := writes(t, b); f > pages/10 {
		t.Errorf("after Fresh, %d pages written took %d page faults", pages, f)
	}
}

// TestFreshKeepsTheBytes: populating pages already there changes none of
// their bytes, and Fresh on memory fresh from the system leaves it zero.
func TestFreshKeepsTheBytes(t *testing.T) {
	const n = 1 << 20
	m := fresh(t, n)
	for i := range m {
		m[i] = byte(i % 251)
	}
	want := bytes.Clone(m)
	if Fresh(m) && !bytes.Equal(m, want) { // page-aligned: every byte in a whole page
		t.Error("Fresh changed the bytes of pages already written")
	}
	z := fresh(t, n)[3 : n-5]
	Fresh(z)
	if i := bytes.IndexFunc(z, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Errorf("Fresh left a byte other than zero at %d of fresh memory", i)
	}
}

// TestFreshWithoutPopulate: where the kernel refuses the advice, Fresh
// writes each page, once refused for every later call.
func TestFreshWithoutPopulate(t *testing.T) {
	noRace(t)
	defer unsupported.Store(unsupported.Load())
	unsupported.Store(true)
	const n = 1 << 20
	b := fresh(t, n)
	f := minorFaults(t)
	if Fresh(b) {
		t.Fatal("Fresh populated a range with populating off")
	}
	if got := minorFaults(t) - f; got < int64(n/page/2) {
		t.Skipf("%d page faults for %d pages written: this system does not fault on each page's first write", got, n/page)
	}
	if f := writes(t, b); f > int64(n/page/10) {
		t.Errorf("pages Fresh wrote took %d page faults when written again", f)
	}
	if i := bytes.IndexFunc(b, func(r rune) bool { return r != 7 && r != 0 }); i >= 0 {
		t.Errorf("byte %d is %d", i, b[i])
	}
}

// BenchmarkPrefault measures a page's first write (a page fault each)
// against Fresh's populating of the same amount of fresh memory, 256 KiB
// a call (heapwarm's chunk), 64 MiB mapped per round, half each way.
func BenchmarkPrefault(b *testing.B) {
	const size, call = 64 << 20, 256 << 10
	var first, pop time.Duration
	for b.Loop() {
		m := fresh(b, size)
		start := time.Now()
		for i := 0; i < size/2; i += page {
			m[i] = 1
		}
		mid := time.Now()
		for off := size / 2; off < size; off += call {
			Fresh(m[off : off+call])
		}
		first, pop = first+mid.Sub(start), pop+time.Since(mid)
	}
	pages := float64(b.N) * size / 2 / float64(page)
	b.ReportMetric(float64(first.Nanoseconds())/pages/1e3, "µs/page-first-write")
	b.ReportMetric(float64(pop.Nanoseconds())/pages/1e3, "µs/page-prefault")
}
