package capture

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// validSegment writes a small log and returns its first segment's bytes.
func validSegment(t testing.TB) []byte {
	t.Helper()
	w, dir := openTest(t, Options{FrameBytes: 2 << 10})
	rng := rand.New(rand.NewPCG(5, 5))
	var msgs []string
	for i := range 6 {
		call := fmt.Sprint("c", i)
		msgs = append(msgs, `{"role":"user","content":`+jsonString(text(rng, 20+i*10))+`}`)
		body := `{"model":"m","messages":[` + strings.Join(msgs, ",") + `],"stream":true}`
		enqueue(t, w, Record{Kind: KindRequest, Call: call, Data: []byte(body), Header: testHeader()})
		for j := range 8 {
			enqueue(t, w, Record{Kind: KindEvent, Call: call, Seq: j, Data: sseEvent(rng, call)})
		}
		enqueue(t, w, Record{Kind: KindEnd, Call: call, Outcome: "complete"})
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, segName(1)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var testDecoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
	zstd.WithDecoderMaxMemory(maxFrameLen), zstd.WithDecoderMaxWindow(maxFrameLen))

var testEncoder, _ = zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest))

// readBoth reads a segment given as bytes forward and backward.
func readBoth(t testing.TB, data []byte) (fwd, back []Located) {
	r := &Reader{dec: testDecoder}
	r.cache.init(64 << 20)
	r.segs = []*segment{newSegment(1, bytes.NewReader(data), int64(len(data)))}
	_, _ = r.forward(Pos{}, readOpts{resolve: true}, func(l Located) error { fwd = append(fwd, l); return nil })
	_ = r.backward(&Filter{}, func(l Located) bool { back = append(back, l); return true }, true)
	return fwd, back
}

// TestTruncatedSegment cuts a segment at every frame boundary and in the
// middle of frames: forward and backward reads agree, and they return a
// prefix of the whole segment's records.
func TestTruncatedSegment(t *testing.T) {
	data := validSegment(t)
	full, _ := readBoth(t, data)
	if len(full) < 40 {
		t.Fatalf("only %d records in the sample segment", len(full))
	}
	step := max(1, len(data)/300)
	for cut := 0; cut <= len(data); cut += step {
		fwd, back := readBoth(t, data[:cut])
		if len(fwd) != len(back) {
			t.Fatalf("cut %d: forward %d records, backward %d", cut, len(fwd), len(back))
		}
		for i := range fwd {
			b := back[len(back)-1-i]
			if fwd[i].Pos != b.Pos || fwd[i].Pos != full[i].Pos || !bytes.Equal(fwd[i].Record.Data, full[i].Record.Data) {
				t.Fatalf("cut %d: record %d differs", cut, i)
			}
		}
	}
}

// FuzzReader feeds random and damaged segment bytes to the reader: it must
// never crash nor return a request that is not whole. With wrap set, the
// input is the raw content of frames, wrapped in a segment with valid
// checksums, so the fuzzer reaches the record and skeleton decoders.
func FuzzReader(f *testing.F) {
	data := validSegment(f)
	f.Add(data, false)
	f.Add(data[:len(data)/2], false)
	f.Add(data[:segHeaderSize+10], false)
	f.Add([]byte{}, false)
	damaged := bytes.Clone(data)
	damaged[len(damaged)/3] ^= 0xff
	f.Add(damaged, false)
	for _, raw := range frameContents(f, data) {
		f.Add(raw, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, wrap bool) {
		if wrap {
			b = segmentAround(b)
		}
		fwd, back := readBoth(t, b)
		for _, l := range append(fwd, back...) {
			if l.Err == nil && l.Size != len(l.Record.Data) {
				t.Fatalf("record at %v: size %d, data %d bytes", l.Pos, l.Size, len(l.Record.Data))
			}
		}
	})
}

// frameContents returns the decompressed frames of a segment.
func frameContents(t testing.TB, data []byte) [][]byte {
	r, err := OpenReader(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	s := newSegment(1, bytes.NewReader(data), int64(len(data)))
	var out [][]byte
	for fi, ok := s.nextFrame(0); ok; fi, ok = s.nextFrame(fi.next()) {
		fd, err := decodeFrame(r.dec, s, fi)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, fd.raw)
	}
	return out
}

// segmentAround wraps raw as two frames (split in the middle of the
// records) of a segment with valid checksums and counts.
func segmentAround(raw []byte) []byte {
	enc := testEncoder
	recs, blobs := countRecords(raw)
	half, n := 0, 0
	for half < len(raw) && n < recs/2 {
		l, k := binary.Uvarint(raw[half:])
		half += k + int(l)
		n++
	}
	b := appendSegHeader(nil, 1, t0)
	firstBlobs := 0
	for _, part := range [][]byte{raw[:half], raw[half:]} {
		r, bl := countRecords(part)
		hdr := len(b)
		b = append(b, make([]byte, frameHeaderSize)...)
		b = enc.EncodeAll(part, b)
		body := b[hdr+frameHeaderSize:]
		putFrameHeader(b[hdr:], uint32(len(body)))
		b = appendTrailer(b, trailer{FrameLen: uint32(len(body)), RawLen: uint32(len(part)), Records: uint32(r),
			BlobFirst: uint32(firstBlobs), Blobs: uint32(bl), MaxTime: 1, FrameCRC: crc(body)})
		firstBlobs += bl
	}
	_ = blobs
	return b
}

// countRecords counts the records and blob records of a frame's content,
// as far as it parses.
func countRecords(raw []byte) (recs, blobs int) {
	for len(raw) > 0 {
		l, k := binary.Uvarint(raw)
		if k <= 0 || l > uint64(len(raw)-k) {
			return recs, blobs
		}
		if l > 0 && Kind(raw[k]) == kindBlob {
			blobs++
		}
		raw = raw[k+int(l):]
		recs++
	}
	return recs, blobs
}

func BenchmarkReadBoth(b *testing.B) {
	data := validSegment(b)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		readBoth(b, data)
	}
}

func BenchmarkSegmentAround(b *testing.B) {
	data := frameContents(b, validSegment(b))[0]
	for b.Loop() {
		readBoth(b, segmentAround(data))
	}
}
