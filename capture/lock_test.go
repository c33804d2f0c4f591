//go:build unix

package capture

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestOneWriterADirectory: a second Writer on a directory another holds
// is refused (before, it opened, and its retention deleted the segment the
// first was writing, whose records were lost while reported written); once
// the first closes, the directory opens again.
func TestOneWriterADirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "capture")
	a, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := Open(Options{Dir: dir}); !errors.Is(err, ErrDirInUse) {
		if b != nil {
			_ = b.Close()
		}
		t.Fatalf("a second writer on the directory: %v, want ErrDirInUse", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	_ = b.Close()
}
