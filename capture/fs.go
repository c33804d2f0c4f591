package capture

import (
	"io/fs"
	"os"
)

// FS is the part of the file system a Writer uses. Tests replace it to
// inject write errors; the zero Options use the operating system's.
type FS interface {
	MkdirAll(path string, perm fs.FileMode) error
	// Create creates a new file; it fails if name exists.
	Create(name string, perm fs.FileMode) (File, error)
	ReadDir(name string) ([]fs.DirEntry, error)
	Remove(name string) error
}

// File is a segment file open for appending.
type File interface {
	Write(p []byte) (int, error)
	Sync() error
	Truncate(size int64) error
	Close() error
}

// OSFS is the operating system's file system.
type OSFS struct{}

var _ FS = OSFS{}

// MkdirAll creates path with mode perm (and makes sure the last element has
// exactly that mode, whatever the umask).
func (OSFS) MkdirAll(path string, perm fs.FileMode) error {
	if err := os.MkdirAll(path, perm); err != nil {
		return err
	}
	return os.Chmod(path, perm)
}

// Create creates name exclusively, for appending.
func (OSFS) Create(name string, perm fs.FileMode) (File, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, perm)
}

// ReadDir lists a directory.
func (OSFS) ReadDir(name string) ([]fs.DirEntry, error) { return os.ReadDir(name) }

// Remove removes a file.
func (OSFS) Remove(name string) error { return os.Remove(name) }
