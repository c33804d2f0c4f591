package prefault

import (
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// unsupported is set once the kernel refused the advice (before Linux
// 5.14, EINVAL): every later call then writes the pages instead.
var unsupported atomic.Bool

// populate faults b's whole pages in, writable, in one call.
func populate(b []byte) bool {
	if unsupported.Load() {
		return false
	}
	if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); err != nil {
		if err == unix.EINVAL {
			unsupported.Store(true)
		}
		return false
	}
	return true
}
