package bigbuf

import (
	"os"
	"runtime"
	"syscall"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/prefault"
	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// writeFaults writes a byte to each page of b and returns the page faults
// the process took meanwhile.
func writeFaults(t *testing.T, b []byte) int64 {
	t.Helper()
	var r0, r1 syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(b); i += os.Getpagesize() {
		b[i] = 1
	}
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r1); err != nil {
		t.Fatal(err)
	}
	return r1.Minflt - r0.Minflt
}

// TestFreshBufferFaultedIn: a buffer Make allocates afresh has the pages
// its caller is to write faulted in at once where the system can
// (internal/prefault), so that the body read into it takes no page fault
// a page; a plain make of the same size, on memory the process never
// touched, does.
func TestFreshBufferFaultedIn(t *testing.T) {
	if testenv.Race {
		t.Skip("the race detector's shadow memory takes page faults of its own")
	}
	if !prefault.Populate(make([]byte, 64<<10)) {
		t.Skip("this system cannot populate a range: Make leaves the pages to fault as they are written")
	}
	const n = 12 << 20 // a class no other test uses, so the free list has none
	pages := int64(n / os.Getpagesize())
	plain := make([]byte, n)
	if f := writeFaults(t, plain); f < pages/2 {
		t.Skipf("%d page faults for %d pages of a fresh allocation: this system does not fault on each page's first write, or the runtime gave touched memory", f, pages)
	}
	made0, _ := Counts()
	b := Make(n)
	if made, _ := Counts(); made != made0+1 {
		t.Fatalf("Make(%d) took a buffer from the free list", n)
	}
	if f := writeFaults(t, b); f > pages/10 {
		t.Errorf("a fresh buffer of %d pages took %d page faults when written", pages, f)
	}
	runtime.KeepAlive(plain)
	Release(b)
}
