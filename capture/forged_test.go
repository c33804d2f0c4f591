package capture

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// fakeFrame is a whole, valid frame holding one note record of call.
func fakeFrame(call string) []byte {
	rec := Record{Kind: KindNote, Call: call, Time: t0, Data: []byte("FORGED")}
	body := appendRecordBody(nil, &rec)
	body = appendBytesField(body, fData, rec.Data)
	raw := binary.AppendUvarint(nil, uint64(len(body)))
	raw = append(raw, body...)
	z := testEncoder.EncodeAll(raw, nil)
	out := make([]byte, frameHeaderSize)
	putFrameHeader(out, uint32(len(z)))
	out = append(out, z...)
	return appendTrailer(out, trailer{FrameLen: uint32(len(z)), RawLen: uint32(len(raw)), Records: 1, MaxTime: t0.UnixNano(), FrameCRC: crc(z)})
}

// TestStoredBytesNeverReadAsFrames: a record's data (an upstream's event:
// bytes nobody checked) that holds a whole, valid frame, stored as it came
// (zstd keeps incompressible bytes raw), is never read as a record: not
// when reading from an offset inside the frame that holds it (ParsePos
// allows any), and not when the tail is torn inside that frame. Before,
// the readers searched for trailers and found the one inside the data.
func TestStoredBytesNeverReadAsFrames(t *testing.T) {
	dir, path, full, _ := writeForgedLog(t)
	check := func(what string, ls []Located) {
		t.Helper()
		for _, l := range ls {
			if l.Record.Call != "real" {
				t.Errorf("%s: read a record of call %q at %v, which was never written", what, l.Record.Call, l.Pos)
			}
		}
	}
	r := openReaderTest(t, dir)
	all := scanAll(t, r)
	if len(all) != 2 {
		t.Fatalf("scan: %d records, want 2", len(all))
	}
	check("scan", all)
	for _, off := range []int64{all[1].Pos.Offset + 1, all[1].Pos.Offset + 8<<10, all[1].Pos.Offset + 100} {
		var got []Located
		if _, err := r.ReadFrom(Pos{Segment: 1, Offset: off}, 10, func(l Located) error { got = append(got, l); return nil }); err != nil {
			t.Fatal(err)
		}
		check("read from inside a frame", got)
	}
	if err := os.Truncate(path, int64(len(full))-trailerSize-5); err != nil { // torn inside the second frame's body
		t.Fatal(err)
	}
	tl, err := openReaderTest(t, dir).Tail(5, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	check("tail after a torn tail", tl)
	if len(tl) != 1 {
		t.Errorf("tail after a torn tail: %d records, want the first frame's one", len(tl))
	}
}

// TestDamagedSegmentHeader: a flipped byte in a segment's header no
// longer hides its frames, each of which carries its own checksums.
func TestDamagedSegmentHeader(t *testing.T) {
	dir := noteLog(t, 10, []byte("x"), false)
	path := filepath.Join(dir, segName(1))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 0xff
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := len(scanAll(t, openReaderTest(t, dir))); got != 10 {
		t.Fatalf("a damaged header hid the segment: %d records read, want 10", got)
	}
}

// TestStatsCountDamage: garbage written over a frame in the middle of a
// segment is counted by the statistics (bytes skipped, frames lost) where
// before the records were simply missing, nothing said how many.
func TestStatsCountDamage(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "capture")
	w, err := Open(Options{Dir: dir, FrameBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 30 {
		data := make([]byte, 600)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		enqueue(t, w, Record{Kind: KindNote, Call: "c", Seq: i, Data: data})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r := openReaderTest(t, dir)
	clean, err := ComputeStats(r, time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if clean.Damaged != (Damage{}) {
		t.Fatalf("an intact log reports damage: %+v", clean.Damaged)
	}
	path := filepath.Join(dir, segName(1))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	mid := len(b) / 2
	for i := mid; i < mid+300; i++ {
		b[i] ^= 0x5a
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := ComputeStats(openReaderTest(t, dir), time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Records >= clean.Records {
		t.Fatalf("the damage lost no record (%d of %d): the test proves nothing", st.Records, clean.Records)
	}
	if st.Damaged.Frames == 0 && st.Damaged.Bytes == 0 {
		t.Fatalf("%d records lost, no damage reported", clean.Records-st.Records)
	}
}

// writeForgedLog writes a record, then one whose data holds a whole fake
// frame between noise, and returns the segment's path, its bytes and
// where the fake frame ends in them.
func writeForgedLog(t *testing.T) (dir, path string, full []byte, fakeEnd int64) {
	t.Helper()
	dir = filepath.Join(t.TempDir(), "capture")
	w, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 8<<10)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	fake := fakeFrame("forged")
	enqueue(t, w, Record{Kind: KindEvent, Call: "real", Seq: 0, Data: []byte("first")})
	mustFlush(t, w)
	enqueue(t, w, Record{Kind: KindEvent, Call: "real", Seq: 1, Data: append(append(bytes.Clone(noise), fake...), noise...)})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, segName(1))
	if full, err = os.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndex(full, fake)
	if i < 0 {
		t.Fatal("the fake frame was not stored as it came: the test proves nothing")
	}
	return dir, path, full, int64(i + len(fake))
}

// TestTornRightAfterStoredFrame: a tail torn exactly where frame-like
// bytes inside a record's data end (a write seen half done, as a follower
// can) is a torn tail, not a frame: no reader returns the forged record,
// and a follower that read the torn file gets the real record once the
// frame is whole.
func TestTornRightAfterStoredFrame(t *testing.T) {
	dir, path, full, fakeEnd := writeForgedLog(t)
	if err := os.WriteFile(path, full[:fakeEnd], 0o600); err != nil {
		t.Fatal(err)
	}
	r := openReaderTest(t, dir)
	var got []Located
	pos, err := r.ReadFrom(Pos{}, 0, func(l Located) error { got = append(got, l); return nil })
	if err != nil {
		t.Fatal(err)
	}
	tl, err := openReaderTest(t, dir).Tail(5, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, full, 0o600); err != nil { // the writer finishes the frame
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	r.PollInterval = 10 * time.Millisecond
	_ = r.Follow(ctx, pos, func(l Located) error { got = append(got, l); return nil })
	seq1 := false
	for _, l := range append(got, tl...) {
		if l.Record.Call != "real" {
			t.Errorf("read a forged record at %v", l.Pos)
		}
		seq1 = seq1 || l.Record.Seq == 1
	}
	if !seq1 {
		t.Error("the follower never got the real record once its frame was whole")
	}
}

// TestDamageThenTornTail: a broken frame in the middle of a segment whose
// tail is also torn loses that frame only (the frames after it are read,
// the damage is counted); a damaged last frame of a finished segment is
// counted too.
func TestDamageThenTornTail(t *testing.T) {
	dir := noteLog(t, 10, bytes.Repeat([]byte("x"), 100), true)
	path := filepath.Join(dir, segName(1))
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	all := scanAll(t, openReaderTest(t, dir))
	b[all[4].Pos.Offset] ^= 0xff // frame 5's header
	b = b[:len(b)-trailerSize-3] // the tail torn inside frame 10
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := len(scanAll(t, openReaderTest(t, dir))); got != 8 {
		t.Errorf("read %d of the 8 records left, want 8", got)
	}
	st, err := ComputeStats(openReaderTest(t, dir), time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Damaged.Bytes == 0 {
		t.Errorf("a lost frame and no damage reported: %+v", st.Damaged)
	}

	b, _ = os.ReadFile(path)
	b = b[:all[9].Pos.Offset]       // drop the torn frame: a finished segment
	b[len(b)-trailerSize-3] ^= 0xff // and damage its last frame's body
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	st, err = ComputeStats(openReaderTest(t, dir), time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Damaged.Frames == 0 {
		t.Errorf("the last frame's body is damaged and no frame is counted: %+v", st.Damaged)
	}
}

// noteLog writes n note records holding data into a new log (a frame
// each when eachFrame) and returns its directory.
func noteLog(t *testing.T, n int, data []byte, eachFrame bool) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "capture")
	w, err := Open(Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		enqueue(t, w, Record{Kind: KindNote, Call: "c", Seq: i, Data: data})
		if eachFrame {
			mustFlush(t, w)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}
