package capture

import (
	"bytes"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
)

// faultFS is the OS file system with switchable write errors.
type faultFS struct {
	OSFS
	fail    atomic.Bool // writes and creates fail
	partial atomic.Bool // failing writes write half their bytes first
}

func (f *faultFS) Create(name string, perm fs.FileMode) (File, error) {
	if f.fail.Load() {
		return nil, &fs.PathError{Op: "open", Path: name, Err: syscall.EROFS}
	}
	file, err := f.OSFS.Create(name, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: file, fs: f}, nil
}

type faultFile struct {
	File
	fs *faultFS
}

func (f *faultFile) Write(p []byte) (int, error) {
	if f.fs.fail.Load() {
		n := 0
		if f.fs.partial.Load() {
			n, _ = f.File.Write(p[:len(p)/2])
		}
		return n, syscall.EIO
	}
	return f.File.Write(p)
}

func TestWriteErrorsDoNotBlock(t *testing.T) {
	ffs := &faultFS{}
	w, dir := openTest(t, Options{FS: ffs, FrameBytes: 8 << 10})
	w.maxBackoff = 20 * time.Millisecond
	ev := func(seq int) Record {
		return Record{Kind: KindEvent, Call: "c", Seq: seq, Data: []byte("data: {}\n\n")}
	}
	seq := 0
	for ; seq < 100; seq++ {
		enqueue(t, w, ev(seq))
	}
	mustFlush(t, w)

	ffs.fail.Store(true)
	ffs.partial.Store(true)
	start := time.Now()
	for range 5000 {
		w.Enqueue(ev(-1))
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("5000 Enqueue calls on a failing disk took %v", d)
	}
	if err := w.Flush(); err == nil {
		t.Error("Flush after failed writes returned nil")
	}
	st := w.Stats()
	if st.WriteErrors == 0 || st.Lost == 0 {
		t.Fatalf("stats after failures: %+v", st)
	}

	ffs.fail.Store(false)
	time.Sleep(50 * time.Millisecond) // let the backoff pass
	for i := range 100 {
		enqueue(t, w, ev(seq+i))
	}
	mustFlush(t, w)
	st = w.Stats()
	if st.Written < 200 || st.Written+st.Lost != st.Enqueued {
		t.Fatalf("after recovery: %+v", st)
	}

	// Everything written is readable, the torn frames are skipped, and the
	// losses are on record.
	var good int
	var lost int64
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		switch {
		case l.Record.Kind == KindDrops:
			lost += l.Record.DroppedCount
		case l.Record.Seq >= 0:
			good++
		}
	}
	if good != 200 {
		t.Errorf("read %d good events, want 200", good)
	}
	if lost != st.Lost+st.Dropped {
		t.Errorf("drops records count %d, stats say %d lost + %d dropped", lost, st.Lost, st.Dropped)
	}
	if n := len(segFiles(t, dir)); n < 2 {
		t.Errorf("%d segments: want a new one after the error", n)
	}
}

func TestQueueFullDrops(t *testing.T) {
	ffs := &slowFS{gate: make(chan struct{})}
	w, dir := openTest(t, Options{FS: ffs, QueueSize: 16, FrameBytes: 64})
	// The writer goroutine blocks in its first write; the queue fills.
	accepted, refused := 0, 0
	for i := range 1000 {
		if w.Enqueue(Record{Kind: KindEvent, Call: "c", Seq: i, Data: []byte("data: x\n\n")}) {
			accepted++
		} else {
			refused++
		}
	}
	close(ffs.gate)
	mustFlush(t, w)
	st := w.Stats()
	if refused == 0 || st.Dropped != int64(refused) || st.Enqueued != int64(accepted) {
		t.Fatalf("accepted %d refused %d, stats %+v", accepted, refused, st)
	}
	var drops int64
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		if l.Record.Kind == KindDrops {
			drops += l.Record.DroppedCount
		}
	}
	if drops != int64(refused) {
		t.Errorf("KindDrops records count %d, want %d", drops, refused)
	}
}

func TestQueueBytesBound(t *testing.T) {
	ffs := &slowFS{gate: make(chan struct{})}
	w, _ := openTest(t, Options{FS: ffs, QueueBytes: 1 << 20, FrameBytes: 64})
	big := make([]byte, 300<<10)
	n := 0
	for range 20 {
		if w.Enqueue(Record{Kind: KindBody, Data: big}) {
			n++
		}
	}
	close(ffs.gate)
	// One may be in the writer's hands, three fit in the queue.
	if n > 5 || w.Stats().Dropped == 0 {
		t.Errorf("accepted %d records of 300 KiB with a 1 MiB queue", n)
	}
}

// slowFS blocks every write until gate is closed.
type slowFS struct {
	OSFS
	gate chan struct{}
}

func (f *slowFS) Create(name string, perm fs.FileMode) (File, error) {
	file, err := f.OSFS.Create(name, perm)
	return &slowFile{file, f.gate}, err
}

type slowFile struct {
	File
	gate chan struct{}
}

func (f *slowFile) Write(p []byte) (int, error) {
	<-f.gate
	return f.File.Write(p)
}

// TestFullFilesystem fills a real 1 MiB tmpfs: the writer keeps accepting,
// counts the errors, warns once (not once per lost frame), writes again
// once space is freed, says so, and the log itself then holds a drops
// record with every loss.
func TestFullFilesystem(t *testing.T) {
	mnt := testenv.Tmpfs(t, 1<<20)
	filler := filepath.Join(mnt, "filler")
	dir := filepath.Join(mnt, "capture")
	rec := &testenv.Log{}
	w, err := Open(Options{Dir: dir, FrameBytes: 16 << 10, RetainBytes: -1, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.maxBackoff = 10 * time.Millisecond
	// Incompressible data fills the disk quickly.
	noise := make([]byte, 64<<10)
	for i := range noise {
		noise[i] = byte(i*7919>>3) ^ byte(i*31)
	}
	if err := os.WriteFile(filler, bytes.Repeat(noise, 12), 0o600); err != nil { // 768 KiB
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := 0
	for i := 0; w.Stats().WriteErrors == 0 && i < 200; i++ {
		mu.Lock()
		calls++
		mu.Unlock()
		w.Enqueue(Record{Kind: KindBody, Call: "full", Data: append([]byte(nil), noise[:32<<10]...)})
		_ = w.Flush()
	}
	st := w.Stats()
	if st.WriteErrors == 0 {
		t.Fatalf("no write error on a full tmpfs: %+v", st)
	}
	t.Logf("full after %d bodies: %+v", calls, st)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	enqueue(t, w, Record{Kind: KindNote, Call: "after", Data: []byte(`{"disk":"back"}`)})
	if err := w.Flush(); err != nil {
		t.Fatalf("after freeing space: %v", err)
	}
	got, err := openReaderTest(t, dir).Tail(1, Filter{Kinds: []Kind{KindNote}})
	if err != nil || len(got) != 1 || got[0].Record.Call != "after" {
		t.Fatalf("note after recovery: %v %v", got, err)
	}
	warned := rec.Lines(lossLine)
	if len(warned) != 1 || warned[0]["lost"].Int64() == 0 || !strings.Contains(warned[0]["last_err"].String(), "no space left on device") {
		t.Errorf("warnings on a full disk: %v", warned)
	}
	if n := len(rec.Lines(recoveryLine)); n != 1 {
		t.Errorf("%d notes that writing works again, want 1", n)
	}
	var onRecord int64
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		if l.Record.Kind == KindDrops {
			onRecord += l.Record.DroppedCount
		}
	}
	if st := w.Stats(); onRecord != st.Lost+st.Dropped || onRecord == 0 {
		t.Errorf("drops records hold %d, the writer lost %d and dropped %d", onRecord, st.Lost, st.Dropped)
	}
}

func TestRetention(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "capture")
	noise := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(i*2654435761>>13) ^ byte(i>>5)
		}
		return b
	}
	w, _ := openTest(t, Options{Dir: dir, SegmentBytes: 64 << 10, RetainBytes: 256 << 10, FrameBytes: 16 << 10})
	for i := range 100 {
		enqueue(t, w, Record{Kind: KindBody, Seq: i, Data: noise(16 << 10)})
	}
	mustFlush(t, w)
	var total int64
	segs := segFiles(t, dir)
	for _, s := range segs {
		info, _ := os.Stat(s)
		total += info.Size()
	}
	if total > 256<<10+64<<10 || w.Stats().BytesOnDisk < 1<<20 {
		t.Fatalf("%d bytes in %d segments after writing %d", total, len(segs), w.Stats().BytesOnDisk)
	}
	// What is left reads from the oldest remaining segment on.
	got := scanAll(t, openReaderTest(t, dir))
	if len(got) == 0 || got[len(got)-1].Record.Seq != 99 {
		t.Fatalf("after retention: %d records", len(got))
	}
	if got[0].Record.Seq == 0 {
		t.Error("oldest records still there")
	}

	// Age: segments last written long ago go at the next open (the first
	// writer gone: one writer holds a directory).
	_ = w.Close()
	old := time.Now().Add(-30 * 24 * time.Hour)
	for _, s := range segFiles(t, dir) {
		_ = os.Chtimes(s, old, old)
	}
	w2, _ := openTest(t, Options{Dir: dir})
	enqueue(t, w2, Record{Kind: KindNote, Data: []byte(`{}`)})
	mustFlush(t, w2)
	if segs := segFiles(t, dir); len(segs) != 1 {
		t.Errorf("%d segments left after age retention, want only the new one", len(segs))
	}
}

func TestNoSecretsInFiles(t *testing.T) {
	const secret = "sk-TESTSECRET-0123456789"
	w, dir := openTest(t, Options{})
	enqueue(t, w, Record{Kind: KindRequest, Call: "c", Header: testHeader(),
		URL: "https://generativelanguage.googleapis.com/v1beta/models?key=" + secret, Data: []byte(`{"messages":[]}`)})
	enqueue(t, w, Record{Kind: KindResponse, Call: "c", Header: map[string][]string{"Set-Cookie": {"s=" + secret}}})
	mustFlush(t, w)
	raw := decompressedFiles(t, dir)
	if !bytes.Contains(raw, []byte("REDACTED")) {
		t.Fatal("no redaction marker: the check would prove nothing")
	}
	if bytes.Contains(raw, []byte(secret)) {
		t.Error("secret in decompressed segment")
	}
	for _, f := range segFiles(t, dir) {
		b, _ := os.ReadFile(f)
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("secret in %s", f)
		}
	}
	got := scanAll(t, openReaderTest(t, dir))
	if h := got[0].Record.Header.Get("Authorization"); !strings.HasPrefix(h, "[REDACTED len=") {
		t.Errorf("Authorization read back as %q", h)
	}
}

func TestFileModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "capture")
	w, _ := openTest(t, Options{Dir: dir})
	enqueue(t, w, Record{Kind: KindNote, Data: []byte(`{}`)})
	mustFlush(t, w)
	if m := fileMode(t, dir); m != 0o700 {
		t.Errorf("dir mode %o, want 700", m)
	}
	for _, f := range segFiles(t, dir) {
		if m := fileMode(t, f); m != 0o600 {
			t.Errorf("%s mode %o, want 600", f, m)
		}
	}
}

func TestClosedWriter(t *testing.T) {
	w, _ := openTest(t, Options{})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if w.Enqueue(Record{Kind: KindNote}) {
		t.Error("Enqueue after Close accepted")
	}
	if err := w.Flush(); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush after Close: %v", err)
	}
	if err := w.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}
