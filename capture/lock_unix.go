//go:build unix

package capture

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes the capture directory for this Writer: a second Writer
// on it (another process, or the same one) would delete segments the
// first is writing when it enforces retention, and both would number
// their segments alike. The lock is released by unlock, or by the
// process's exit.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("capture dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, ErrDirInUse
		}
		return nil, fmt.Errorf("capture dir lock: %w", err)
	}
	return func() { _ = f.Close() }, nil
}
