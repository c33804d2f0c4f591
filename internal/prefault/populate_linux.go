package prefault

import (
	"errors"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// unsupported is set once the system refused the advice as such (EINVAL
// before Linux 5.14; ENOSYS or EPERM under a sandbox's filter): every
// later call then leaves the pages to be written. Other errors (no
// memory, a range the process cannot write) are the call's own.
var unsupported atomic.Bool

// populate faults b's whole pages in, writable, in one call; b starts on
// a page.
func populate(b []byte) bool {
	if unsupported.Load() {
		return false
	}
	err := unix.Madvise(b, unix.MADV_POPULATE_WRITE)
	if err != nil && refused(err) {
		unsupported.Store(true)
	}
	return err == nil
}

// refused reports whether err says the system does not do the advice.
func refused(err error) bool {
	return errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM)
}
