package originals

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// warnings returns the attributes of the loss warnings.
func warnings(l *testenv.Log) []map[string]slog.Value { return l.Lines("originals table:") }

func total(lines []map[string]slog.Value, key string) int64 {
	var n int64
	for _, l := range lines {
		n += l[key].Int64()
	}
	return n
}

// turnOf returns n entries of size bytes for one conversation's turn.
func turnOf(conv string, turn, n, size int) []Entry {
	var es []Entry
	for i := range n {
		es = append(es, entry(conv, turn, fmt.Sprintf("%s-%d", conv, i), text(uint64(len(conv)*1000+i), size)))
	}
	return es
}

// TestWriterStaysWithinMaxBytes: 60 conversations write 1.2 MB of
// originals into a table bounded at 512 KiB. The file never grows past
// the bound; the conversations idle longest make room, the newest keep
// every entry, and the evictions are told in one warning a period.
func TestWriterStaysWithinMaxBytes(t *testing.T) {
	const bound = 512 << 10
	c := testenv.NewClock()
	rec := &testenv.Log{}
	s := openTest(t, Options{MaxBytes: bound, Now: c.Now, Logger: slog.New(rec)})
	w := s.Async(64)
	for i := range 60 {
		conv := fmt.Sprintf("c%02d", i)
		c.Add(time.Second)
		w.BeginTurn(conv, 1)
		w.Put(turnOf(conv, 1, 10, 2048))
		w.Flush()
		if size := fileSize(t, s.Path()); size > bound {
			t.Fatalf("after conversation %d: file %d bytes, bound %d", i, size, bound)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Evicted() == 0 || w.Refused() != 0 || w.Failed() != 0 {
		t.Fatalf("evicted %d, refused %d, failed %d", w.Evicted(), w.Refused(), w.Failed())
	}
	if n := len(listKeys(t, s, "c59")); n != 10 {
		t.Errorf("the newest conversation has %d of its 10 entries", n)
	}
	if got, _ := s.Lookup("c59-3"); len(got) != 1 {
		t.Errorf("lookup in the newest conversation: %d entries", len(got))
	}
	if n := len(listKeys(t, s, "c00")); n != 0 {
		t.Errorf("the conversation idle longest kept %d entries", n)
	}
	warned := warnings(rec)
	if len(warned) == 0 || len(warned) > 2 || total(warned, "evicted_conversations") != w.Evicted() {
		t.Errorf("warnings %v for %d evictions", warned, w.Evicted())
	}
}

// TestWriterRefusesWhatCannotFit: a turn larger than the bound is
// refused whole (Writer.Refused), other conversations are removed to try,
// and a small turn queued with it still goes in.
func TestWriterRefusesWhatCannotFit(t *testing.T) {
	const bound = 256 << 10
	s := openTest(t, Options{MaxBytes: bound})
	w := s.Async(4)
	w.Put(turnOf("a", 1, 4, 1024))
	w.Flush()
	w.Put(turnOf("b", 1, 200, 2048))
	w.Put(turnOf("c", 1, 2, 1024))
	if err := w.Close(); err != nil || w.Refused() != 200 {
		t.Errorf("writer: refused %d, err %v; want the 200 entries of b", w.Refused(), err)
	}
	if size := fileSize(t, s.Path()); size > bound {
		t.Errorf("file %d bytes", size)
	}
	if n := len(listKeys(t, s, "c")); n != 2 {
		t.Errorf("a small turn queued with a refused one: %d of its 2 entries", n)
	}
	if w.Evicted() != 1 || len(listKeys(t, s, "a")) != 0 {
		t.Errorf("evicted %d: the idle conversation a should have made room", w.Evicted())
	}
}

// tmpfs mounts a tmpfs of size bytes for the test.
func tmpfs(t *testing.T, size int) string { return testenv.Tmpfs(t, size) }

// fsFree returns the free bytes of the file system at dir.
func fsFree(t *testing.T, dir string) int64 {
	t.Helper()
	free, ok := diskFree(dir)
	if !ok {
		t.Skip("no free-space figure on this system")
	}
	return free
}

// fillDisk writes a file at path until the file system is full.
func fillDisk(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := []byte(text(1, 4096))
	for {
		if _, err := f.Write(block); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// TestSmallFilesystem runs the default table (MaxBytes 8 MiB) on a real
// 4 MiB tmpfs. Filling it with 4 MB of originals leaves most of the disk
// free: the table grows into at most a quarter of what is free, and
// entries get half of that. On a disk someone else filled, entries that
// need the file to grow are refused with one warning, not one per write;
// once space is freed the same entries go in.
func TestSmallFilesystem(t *testing.T) {
	const fsSize = 4 << 20
	mnt := tmpfs(t, fsSize)
	path := filepath.Join(mnt, FileName)
	s, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := s.Async(1024)
	for i := range 200 {
		conv := fmt.Sprintf("c%03d", i)
		w.BeginTurn(conv, 1)
		w.Put(turnOf(conv, 1, 10, 2048))
		w.Flush()
	}
	if size, free := fileSize(t, path), fsFree(t, mnt); size > fsSize*2/5 || free < fsSize/2 {
		t.Fatalf("4 MB of originals: file %d bytes, %d bytes left free of %d", size, free, fsSize)
	}
	if w.Evicted() == 0 || w.Refused() != 0 {
		t.Fatalf("evicted %d, refused %d: want evictions only", w.Evicted(), w.Refused())
	}
	if err := errors.Join(w.Close(), s.Close(), os.Remove(path)); err != nil {
		t.Fatal(err)
	}

	// A new table on a disk someone else filled: a turn that needs the
	// file to grow is refused, four times, with at most one warning.
	rec := &testenv.Log{}
	if s, err = Open(path, Options{Logger: slog.New(rec)}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w = s.Async(16)
	fillDisk(t, filepath.Join(mnt, "filler"))
	big := turnOf("big", 1, 50, 2048)
	for range 2 {
		if err := s.Put(big); !errors.Is(err, ErrFull) {
			t.Fatalf("a 100 KB turn on a full disk: %v, want ErrFull", err)
		}
		w.Put(big)
		w.Flush()
	}
	if w.Refused() != 2*int64(len(big)) {
		t.Errorf("writer refused %d entries, want %d", w.Refused(), 2*len(big))
	}
	if n := len(warnings(rec)); n != 1 {
		t.Errorf("%d warnings for four refusals within %v, want 1", n, ReportEvery)
	}

	// Space comes back: the table grows again by itself.
	if err := os.Remove(filepath.Join(mnt, "filler")); err != nil {
		t.Fatal(err)
	}
	w.Put(big)
	if err := w.Close(); err != nil || w.Refused() != 2*int64(len(big)) {
		t.Fatalf("after freeing the disk: refused %d, %v", w.Refused(), err)
	}
	if got, _ := s.Lookup("big-49"); len(got) != 1 {
		t.Error("the turn is not there after space came back")
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
}
