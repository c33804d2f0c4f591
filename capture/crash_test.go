package capture

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const childEnv = "SHAPERPROXY_CAPTURE_CRASH_CHILD"

// TestCrashChild is the writer that TestKillDashNine kills. It writes
// numbered events forever and prints how many are flushed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(childEnv)
	if dir == "" {
		t.Skip("run by TestKillDashNine")
	}
	w, err := Open(Options{Dir: dir, FrameBytes: 32 << 10, FlushInterval: 5 * time.Millisecond, SegmentBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 1))
	deadline := time.Now().Add(30 * time.Second)
	for seq := 0; time.Now().Before(deadline); seq++ {
		for !w.Enqueue(Record{Kind: KindEvent, Call: "crash", Seq: seq, Data: sseEvent(rng, "crash")}) {
			time.Sleep(time.Millisecond) // keep the sequence without holes
		}
		if seq%500 == 499 {
			if err := w.Flush(); err != nil {
				t.Fatal(err)
			}
			fmt.Printf("flushed %d\n", seq+1)
		}
	}
}

// TestKillDashNine kills a writer with SIGKILL in the middle of its work:
// every record flushed before is readable, a torn tail is skipped, and a
// new Writer starts a new segment.
func TestKillDashNine(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		t.Skip("child")
	}
	dir := filepath.Join(t.TempDir(), "capture")
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	flushed := 0
	sc := bufio.NewScanner(out)
	for flushed < 8000 && sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "flushed "); ok {
			flushed, _ = strconv.Atoi(n)
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if flushed < 8000 {
		t.Fatalf("child flushed only %d records", flushed)
	}

	got := readSeqs(t, dir)
	if len(got) < flushed {
		t.Fatalf("read %d records, %d were flushed", len(got), flushed)
	}
	t.Logf("flushed %d, read %d after SIGKILL", flushed, len(got))

	// Tear the last frame the way a crash in the middle of a write would,
	// and leave a few garbage bytes after it.
	segs := segFiles(t, dir)
	last := segs[len(segs)-1]
	tearLastFrame(t, last)
	torn := readSeqs(t, dir)
	if len(torn) < flushed-1000 || len(torn) >= len(got) {
		t.Fatalf("after tearing: %d records (had %d)", len(torn), len(got))
	}
	r := openReaderTest(t, dir)
	tail, err := r.Tail(3, Filter{})
	if err != nil || len(tail) != 3 || tail[2].Record.Seq != len(torn)-1 {
		t.Fatalf("tail after tear: %v %v", tail, err)
	}

	// A new writer never appends after the torn tail.
	info, _ := os.Stat(last)
	w, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		w.Enqueue(Record{Kind: KindEvent, Call: "crash", Seq: len(torn) + i, Data: []byte("data: after\n\n")})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	after := segFiles(t, dir)
	if len(after) != len(segs)+1 || after[len(after)-1] <= last {
		t.Fatalf("segments %v after reopening, had %v", after, segs)
	}
	if info2, _ := os.Stat(last); info2.Size() != info.Size() {
		t.Fatalf("torn segment changed size %d -> %d", info.Size(), info2.Size())
	}
	if all := readSeqs(t, dir); len(all) != len(torn)+10 {
		t.Fatalf("read %d records after reopening, want %d", len(all), len(torn)+10)
	}
}

// readSeqs reads every record and checks that the sequence has no hole.
func readSeqs(t *testing.T, dir string) []int {
	t.Helper()
	var seqs []int
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		if l.Record.Seq != len(seqs) {
			t.Fatalf("record %d has seq %d (at %v)", len(seqs), l.Record.Seq, l.Pos)
		}
		seqs = append(seqs, l.Record.Seq)
	}
	return seqs
}

func segFiles(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "capture-*.zst"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no segments: %v", err)
	}
	return m // sorted by name, which sorts by number
}

// tearLastFrame cuts the last frame of a segment in the middle of its body
// and appends garbage.
func tearLastFrame(t *testing.T, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	info, _ := f.Stat()
	s := newSegment(1, f, info.Size())
	fi, ok := s.prevFrame(s.end)
	if !ok {
		t.Fatal("no frame to tear")
	}
	if err := f.Truncate(fi.off + frameHeaderSize + int64(fi.t.FrameLen)/2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("\x00garbage"), fi.off+frameHeaderSize+int64(fi.t.FrameLen)/2); err != nil {
		t.Fatal(err)
	}
}
