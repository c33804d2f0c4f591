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

import "os"

var page = os.Getpagesize()

// Fresh makes b's pages resident and writable, for memory its caller is
// about to write all of: where the system can fault a range in at once
// (populate), that takes one call and leaves b's bytes as they were;
// elsewhere, and for the partial pages at b's ends, it writes a zero to
// a byte of each page, so b must hold zeros there (memory fresh from
// make) or bytes its caller does not need. It reports whether the range
// was faulted in at once.
func Fresh(b []byte) (populated bool) {
	if len(b) == 0 {
		return false
	}
	lo := alignUp(b)
	hi := lo + (len(b)-lo)/page*page
	if lo < hi && populate(b[lo:hi]) {
		touch(b[:lo])
		touch(b[hi:])
		return true
	}
	touch(b)
	return false
}

// alignUp is the offset in b of its first whole page.
func alignUp(b []byte) int {
	off := int(addr(b) % uintptr(page))
	if off == 0 {
		return 0
	}
	return min(len(b), page-off)
}

// touch writes a zero to a byte of each page b reaches into.
func touch(b []byte) {
	if len(b) == 0 {
		return
	}
	b[0] = 0
	for i := alignUp(b); i < len(b); i += page {
		b[i] = 0
	}
}
