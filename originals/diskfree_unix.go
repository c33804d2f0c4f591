//go:build linux || darwin || freebsd

package originals

import "syscall"

// diskFree returns the bytes an unprivileged process may still write on
// the file system holding dir.
func diskFree(dir string) (int64, bool) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(uint64(st.Bavail) * uint64(st.Bsize)), true
}
