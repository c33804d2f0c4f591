// Package prefault makes a fresh buffer's pages resident in one system
// call, before anything writes to them, instead of a page fault on each
// page's first write.
//
// Memory the Go runtime has just taken from the system, or given back to
// it and taken again, is mapped but not resident: the first write to each
// 4 KiB page traps into the kernel, which finds a page, clears it and maps
// it. On the virtual machine the benchmarks run on that trap costs 11–14
// µs a page (BenchmarkPrefault, "µs/page-first-write"); asking the kernel
// to fault a whole range in at once (madvise MADV_POPULATE_WRITE, Linux
// 5.14 and later) costs about 1 µs a page ("µs/page-prefault"), the
// clearing and mapping without a trap each.
package prefault

import (
	"os"
	"unsafe"
)

var page = os.Getpagesize()

// Populate has the system fault b's whole pages in, writable, in one
// call, where it can (Linux 5.14 and later), leaving b's bytes as they
// were; it reports whether it did. Elsewhere it does nothing: the pages
// fault in as they are first written, as they would have.
func Populate(b []byte) bool {
	lo, hi := whole(b)
	return lo < hi && populate(b[lo:hi])
}

// Fresh makes every page of b resident and writable, for memory its
// caller is about to write all of: Populate for b's whole pages, and a
// zero written to a byte of each page it leaves (b's partial pages at
// either end; all of b where the system cannot populate). So b must hold
// zeros there (memory fresh from make) or bytes its caller does not need.
// It reports whether the whole pages were populated.
func Fresh(b []byte) (populated bool) {
	lo, hi := whole(b)
	if lo < hi && populate(b[lo:hi]) {
		touch(b[:lo])
		touch(b[hi:])
		return true
	}
	touch(b)
	return false
}

// whole returns the bounds in b of its whole pages (lo == hi: none).
func whole(b []byte) (lo, hi int) {
	if off := int(addr(b) % uintptr(page)); off != 0 {
		lo = min(len(b), page-off)
	}
	return lo, lo + (len(b)-lo)/page*page
}

// addr is the address of b's first byte.
func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// touch writes a zero to a byte of each page b reaches into.
func touch(b []byte) {
	if len(b) == 0 {
		return
	}
	b[0] = 0
	lo, _ := whole(b)
	for i := lo; i < len(b); i += page {
		b[i] = 0
	}
}
