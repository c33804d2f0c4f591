package prefault

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// minorFaults is the process's page faults served without a disk so far
// (a populated page counts as one too: these tests count them around the
// writes, not around the populating).
func minorFaults(t testing.TB) int64 {
	t.Helper()
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		t.Fatal(err)
	}
	return r.Minflt
}

// mapped maps n bytes of memory never touched.
func mapped(t testing.TB, n int) []byte {
	t.Helper()
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fresh maps n bytes of memory never touched, unmapped at the test's end.
func fresh(t *testing.T, n int) []byte {
	t.Helper()
	m := mapped(t, n)
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

// canPopulate skips the test where the kernel refuses the advice itself
// (asked directly, on whole pages), so that a Fresh or Populate that fails
// where it can is a failure, not a skip.
func canPopulate(t *testing.T) {
	t.Helper()
	m := fresh(t, 2*page)
	if err := unix.Madvise(m, unix.MADV_POPULATE_WRITE); err != nil {
		if refused(err) {
			t.Skipf("this system cannot populate a range (%v): Fresh writes the pages", err)
		}
		t.Fatal(err)
	}
}

// TestFreshTakesTheFaultsOffTheWrites is what the package is for: memory
// never touched takes a fault on each page's first write, and none after
// Fresh, which faulted it in at once.
func TestFreshTakesTheFaultsOffTheWrites(t *testing.T) {
	noRace(t)
	canPopulate(t)
	const n = 4 << 20
	pages := int64(n / page)
	if f := writes(t, fresh(t, n)); f < pages/2 {
		t.Skipf("%d page faults for %d pages of fresh memory: this system does not fault on each page's first write (huge pages?)", f, pages)
	}
	b := fresh(t, n)[100 : n-100] // ends inside pages: written, not populated
	if !Fresh(b) {
		t.Fatal("Fresh did not populate where the system can")
	}
	if f := writes(t, b); f > pages/10 {
		t.Errorf("after Fresh, %d pages written took %d page faults", pages, f)
	}
}

// TestFreshKeepsTheBytes: populating pages already there changes none of
// their bytes, and Fresh on memory fresh from the system leaves it zero.
func TestFreshKeepsTheBytes(t *testing.T) {
	canPopulate(t)
	const n = 1 << 20
	m := fresh(t, n)
	for i := range m {
		m[i] = byte(i % 251)
	}
	want := bytes.Clone(m)
	if !Populate(m[page/2:]) { // its first partial page left alone
		t.Fatal("Populate did not populate where the system can")
	}
	if !bytes.Equal(m, want) {
		t.Error("Populate changed the bytes of pages already written")
	}
	z := fresh(t, n)[3 : n-5]
	Fresh(z)
	if i := bytes.IndexFunc(z, func(r rune) bool { return r != 0 }); i >= 0 {
		t.Errorf("Fresh left a byte other than zero at %d of fresh memory", i)
	}
}

// TestFreshWithoutPopulate: once the system refused the advice (here an
// unaligned range, as a kernel before 5.14 refuses every one), Populate
// does nothing and Fresh writes each page.
func TestFreshWithoutPopulate(t *testing.T) {
	noRace(t)
	defer unsupported.Store(unsupported.Load())
	b := fresh(t, 1<<20)
	if populate(b[1 : page+1]) {
		t.Fatal("an unaligned range populated")
	}
	if !unsupported.Load() {
		t.Fatal("a refused advice did not turn populating off")
	}
	f := minorFaults(t)
	if Populate(b) || minorFaults(t) != f {
		t.Fatal("Populate did something with populating off")
	}
	if Fresh(b) {
		t.Fatal("Fresh populated a range with populating off")
	}
	n := int64(len(b) / page)
	if got := minorFaults(t) - f; got < n/2 {
		t.Skipf("%d page faults for %d pages written: this system does not fault on each page's first write", got, n)
	}
	if f := writes(t, b); f > n/10 {
		t.Errorf("pages Fresh wrote took %d page faults when written again", f)
	}
	if i := bytes.IndexFunc(b, func(r rune) bool { return r != 7 && r != 0 }); i >= 0 {
		t.Errorf("byte %d is %d", i, b[i])
	}
}

// TestRefused: the errors that say the system does not do the advice, and
// not the others.
func TestRefused(t *testing.T) {
	for _, err := range []error{unix.EINVAL, unix.ENOSYS, unix.EPERM} {
		if !refused(err) {
			t.Errorf("%v is not taken as refused", err)
		}
	}
	for _, err := range []error{unix.ENOMEM, unix.EFAULT, unix.EINTR, errors.New("other")} {
		if refused(err) {
			t.Errorf("%v is taken as refused", err)
		}
	}
}

// BenchmarkPrefault measures a page's first write (a page fault each)
// against Fresh's populating of the same amount of fresh memory, 256 KiB
// a call (heapwarm's chunk), 64 MiB mapped per round, half each way.
func BenchmarkPrefault(b *testing.B) {
	const size, call = 64 << 20, 256 << 10
	var first, pop time.Duration
	for b.Loop() {
		m := mapped(b, size)
		start := time.Now()
		for i := 0; i < size/2; i += page {
			m[i] = 1
		}
		mid := time.Now()
		for off := size / 2; off < size; off += call {
			Fresh(m[off : off+call])
		}
		first, pop = first+mid.Sub(start), pop+time.Since(mid)
		if err := syscall.Munmap(m); err != nil {
			b.Fatal(err)
		}
	}
	pages := float64(b.N) * size / 2 / float64(page)
	b.ReportMetric(float64(first.Nanoseconds())/pages/1e3, "µs/page-first-write")
	b.ReportMetric(float64(pop.Nanoseconds())/pages/1e3, "µs/page-prefault")
}
