package proxy

import (
	"bytes"
	"errors"
	"syscall"
	"testing"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/prefault"
)

// pieces reads its bytes at most size a read, then fails with err.
type pieces struct {
	b    []byte
	size int
	err  error
}

func (p *pieces) Read(b []byte) (int, error) {
	if len(p.b) == 0 {
		return 0, p.err
	}
	n := copy(b[:min(len(b), p.size)], p.b)
	p.b = p.b[n:]
	return n, nil
}

// residentPages is how many of b's pages are in memory (mincore; b
// starts on a page).
func residentPages(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+syscall.Getpagesize()-1)/syscall.Getpagesize())
	if _, _, e := syscall.Syscall(syscall.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec)))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestReadKeyedFaultsInAsItComes: a fresh body buffer has its pages
// faulted in a keyedRead ahead of the bytes once they come, and none
// while the client has sent nothing.
func TestReadKeyedFaultsInAsItComes(t *testing.T) {
	if !prefault.Populate(make([]byte, 64<<10)) {
		t.Skip("this system cannot populate a range")
	}
	page := syscall.Getpagesize()
	const n = 4 << 20
	probe, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	probe[n/2] = 1
	if got := residentPages(t, probe); got != 1 {
		t.Skipf("a byte written made %d pages resident: huge pages", got)
	}
	_ = syscall.Munmap(probe)
	stalled := errors.New("the client stalled")
	for _, c := range []struct {
		name  string
		sent  int // bytes the client sends before it stalls
		fresh bool
		want  int // pages resident after
	}{
		{"nothing sent", 0, true, 0},
		{"two reads, fresh", 32 << 10, true, (16<<10 + 2*keyedRead) / page}, // from the second read on, a keyedRead at a time: up to a read and two of them
		{"two reads, not fresh", 32 << 10, false, (32 << 10) / page},
	} {
		buf, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		var keys conv.BodyKeys
		r := &pieces{b: bytes.Repeat([]byte("x"), c.sent), size: 16 << 10, err: stalled}
		if err := readKeyed(r, buf, &keys, c.fresh); !errors.Is(err, stalled) {
			t.Errorf("%s: %v, want the reader's error", c.name, err)
		}
		if got := residentPages(t, buf); got != c.want {
			t.Errorf("%s: %d pages resident, want %d", c.name, got, c.want)
		}
		_ = syscall.Munmap(buf)
	}
}
