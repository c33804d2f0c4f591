package sse

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readAll(t testing.TB, in []byte) ([]Event, error) {
	t.Helper()
	r := NewReader(bytes.NewReader(in))
	var evs []Event
	for {
		ev, err := r.Next()
		if err != nil {
			return evs, err
		}
		ev.Raw = append([]byte(nil), ev.Raw...)
		ev.Data = append([]byte(nil), ev.Data...)
		ev.Name = append([]byte(nil), ev.Name...)
		evs = append(evs, ev)
	}
}

func TestReaderEvents(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		raws     []string
		datas    []string
		comments []bool
		partial  bool
	}{
		{
			name:  "two data events and done",
			in:    "data: {\"a\":1}\n\ndata: {\"b\":2}\n\ndata: [DONE]\n\n",
			raws:  []string{"data: {\"a\":1}\n\n", "data: {\"b\":2}\n\n", "data: [DONE]\n\n"},
			datas: []string{`{"a":1}`, `{"b":2}`, "[DONE]"},
		},
		{
			name:     "keep-alive comment",
			in:       ": keep-alive\n\ndata: x\n\n",
			raws:     []string{": keep-alive\n\n", "data: x\n\n"},
			datas:    []string{"", "x"},
			comments: []bool{true, false},
		},
		{
			name:  "crlf and event names",
			in:    "event: message_start\r\ndata: {}\r\n\r\n",
			raws:  []string{"event: message_start\r\ndata: {}\r\n\r\n"},
			datas: []string{"{}"},
		},
		{
			name:  "multi-line data and no space",
			in:    "data:a\ndata: b\n\n",
			raws:  []string{"data:a\ndata: b\n\n"},
			datas: []string{"a\nb"},
		},
		{
			name:    "truncated",
			in:      "data: {\"a\":1}\n\ndata: {\"b\"",
			raws:    []string{"data: {\"a\":1}\n\n", "data: {\"b\""},
			datas:   []string{`{"a":1}`, `{"b"`},
			partial: true,
		},
		{
			name:  "stray blank lines kept",
			in:    "\n\ndata: x\n\n",
			raws:  []string{"\n\ndata: x\n\n"},
			datas: []string{"x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			evs, err := readAll(t, []byte(tt.in))
			if !errors.Is(err, io.EOF) {
				t.Fatalf("err = %v, want EOF", err)
			}
			if len(evs) != len(tt.raws) {
				t.Fatalf("got %d events, want %d: %+v", len(evs), len(tt.raws), evs)
			}
			var joined []byte
			for i, ev := range evs {
				joined = append(joined, ev.Raw...)
				if string(ev.Raw) != tt.raws[i] {
					t.Errorf("event %d raw = %q, want %q", i, ev.Raw, tt.raws[i])
				}
				if string(ev.Data) != tt.datas[i] {
					t.Errorf("event %d data = %q, want %q", i, ev.Data, tt.datas[i])
				}
				if tt.comments != nil && ev.Comment != tt.comments[i] {
					t.Errorf("event %d comment = %v", i, ev.Comment)
				}
			}
			if string(joined) != tt.in {
				t.Errorf("raw bytes not preserved: %q", joined)
			}
			if last := evs[len(evs)-1]; last.Partial != tt.partial {
				t.Errorf("partial = %v, want %v", last.Partial, tt.partial)
			}
		})
	}
}

func TestReaderLongLine(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	in := "data: " + big + "\n\ndata: [DONE]\n\n"
	evs, err := readAll(t, []byte(in))
	if !errors.Is(err, io.EOF) || len(evs) != 2 {
		t.Fatalf("got %d events, err %v", len(evs), err)
	}
	if len(evs[0].Data) != 1<<20 || !evs[1].IsDone() {
		t.Fatalf("1 MB line not read whole: %d bytes", len(evs[0].Data))
	}
}

func TestReaderOneByteReads(t *testing.T) {
	in := ": c\n\ndata: {\"x\":\"y\"}\n\nevent: e\ndata: z\n\n"
	r := NewReader(iotest.OneByteReader(strings.NewReader(in)))
	var got []byte
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		got = append(got, ev.Raw...)
	}
	if string(got) != in {
		t.Fatalf("got %q", got)
	}
}

func TestReaderErrorAfterPartial(t *testing.T) {
	boom := errors.New("boom")
	r := NewReader(io.MultiReader(strings.NewReader("data: a\n\ndata: b"), iotest.ErrReader(boom)))
	if ev, err := r.Next(); err != nil || string(ev.Data) != "a" {
		t.Fatalf("first = %q, %v", ev.Data, err)
	}
	if ev, err := r.Next(); err != nil || !ev.Partial || string(ev.Raw) != "data: b" {
		t.Fatalf("second = %+v, %v", ev, err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("third err = %v, want boom", err)
	}
}

// TestReaderBoundsLargeEvents: an event over MaxEvent comes back
// Truncated, with its first MaxEvent bytes, its size, and the next event
// whole; the Reader never keeps more than MaxEvent of it.
func TestReaderBoundsLargeEvents(t *testing.T) {
	big := "data: " + strings.Repeat("x", 100) + "\n\n"
	in := big + "data: [DONE]\n\n"
	r := NewReaderOptions(strings.NewReader(in), Options{MaxEvent: 32, BufferSize: 16})
	ev, err := r.Next()
	if err != nil || !ev.Truncated || ev.Size != int64(len(big)) || string(ev.Raw) != big[:32] || string(ev.Data) != big[6:38] {
		t.Fatalf("large event = %+v, %v", ev, err)
	}
	if cap(r.raw) > 32 || cap(r.data) > 32 {
		t.Fatalf("reader kept %d raw and %d data bytes, limit 32", cap(r.raw), cap(r.data))
	}
	if ev, err := r.Next(); err != nil || ev.Truncated || !ev.IsDone() {
		t.Fatalf("next event = %+v, %v", ev, err)
	}
}

// TestReaderSpill: the bytes of an event over MaxEvent all go to Spill,
// in order, as they are read; smaller events do not.
func TestReaderSpill(t *testing.T) {
	big := "event: e\ndata: " + strings.Repeat("y", 200) + "\ndata: z\n\n"
	in := "data: a\n\n" + big + "data: b"
	var spilled []byte
	var calls int
	r := NewReaderOptions(strings.NewReader(in), Options{MaxEvent: 64, BufferSize: 16, Spill: func(p []byte) error {
		spilled = append(spilled, p...)
		calls++
		return nil
	}})
	var kept []byte
	for {
		ev, err := r.Next()
		if err != nil {
			break
		}
		if ev.Truncated {
			if string(spilled) != big || ev.Size != int64(len(big)) || calls < 2 {
				t.Fatalf("spilled %q in %d calls", spilled, calls)
			}
			continue
		}
		kept = append(kept, ev.Raw...)
	}
	if string(kept) != "data: a\n\ndata: b" {
		t.Fatalf("events outside the spill = %q", kept)
	}
}

// TestReaderSpillError: a failing Spill ends the stream with its error.
func TestReaderSpillError(t *testing.T) {
	boom := errors.New("client gone")
	r := NewReaderOptions(strings.NewReader("data: "+strings.Repeat("x", 100)+"\n\n"), Options{MaxEvent: 16, Spill: func([]byte) error { return boom }})
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the spill's", err)
	}
	if _, err := r.Next(); !errors.Is(err, boom) {
		t.Fatalf("second err = %v, want the spill's again", err)
	}
}

// TestReaderNoLineHeld: a 64 MiB line without a newline is read with the
// Reader's memory bounded by MaxEvent (what it keeps), not by the line.
func TestReaderNoLineHeld(t *testing.T) {
	const n = 64 << 20
	src := io.MultiReader(strings.NewReader("data: "), io.LimitReader(repeatReader('x'), n))
	r := NewReaderOptions(src, Options{MaxEvent: 1 << 20})
	ev, err := r.Next()
	if err != nil || !ev.Partial || !ev.Truncated || ev.Size != n+6 || len(ev.Raw) != 1<<20 {
		t.Fatalf("event = partial %v truncated %v size %d raw %d, err %v", ev.Partial, ev.Truncated, ev.Size, len(ev.Raw), err)
	}
	if cap(r.raw) > 1<<20 || cap(r.data) > 1<<20 {
		t.Fatalf("reader holds %d + %d bytes", cap(r.raw), cap(r.data))
	}
}

type repeatReader byte

func (b repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\n: keep-alive\n\ndata: [DONE]\n\n"), uint16(0), uint8(0))
	f.Add([]byte("event: x\r\ndata:\r\n\r\n\n\ndata"), uint16(5), uint8(0))
	f.Add([]byte("data:               \r\n\r\ndata: x\r"), uint16(3), uint8(1))
	f.Add([]byte("\r\r\n\n:\r\n\r\n\rdata\n\n"), uint16(100), uint8(2))
	f.Fuzz(func(t *testing.T, in []byte, limit uint16, buf uint8) {
		checkAgainstReference(t, in, int(limit), 16+int(buf))
	})
}

// checkAgainstReference reads in with a bounded Reader (max bytes kept,
// 0: unbounded in practice; a read buffer of bufSize) and checks every
// event against the unbounded reference: same boundaries and flags; the
// same bytes when the event fits, its beginning when it is truncated; every
// byte handed on exactly once (Raw of the events that fit, Spill for the
// others).
func checkAgainstReference(t *testing.T, in []byte, limit, bufSize int) {
	t.Helper()
	if limit == 0 {
		limit = len(in) + 1
	}
	var out []byte
	r := NewReaderOptions(iotest.HalfReader(bytes.NewReader(in)), Options{MaxEvent: limit, BufferSize: bufSize, Spill: func(p []byte) error {
		out = append(out, p...)
		return nil
	}})
	ref := newRefReader(bytes.NewReader(in))
	for i := 0; ; i++ {
		want, werr := ref.Next()
		got, gerr := r.Next()
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("event %d: err = %v, reference %v", i, gerr, werr)
		}
		if werr != nil {
			break
		}
		compareEvent(t, i, got, want, limit)
		if !got.Truncated {
			out = append(out, got.Raw...)
		}
	}
	if !bytes.Equal(out, in) {
		t.Fatalf("bytes handed on:\n got %q\nwant %q", out, in)
	}
}

func compareEvent(t *testing.T, i int, got, want Event, limit int) {
	t.Helper()
	if got.Partial != want.Partial || got.HasData != want.HasData || got.Comment != want.Comment || got.Size != want.Size {
		t.Fatalf("event %d = %+v, reference %+v", i, got, want)
	}
	trunc := len(want.Raw) > limit
	if got.Truncated != trunc {
		t.Fatalf("event %d: truncated = %v, want %v (size %d, limit %d)", i, got.Truncated, trunc, want.Size, limit)
	}
	if len(got.Raw) > limit || len(got.Data) > limit || len(got.Name) > limit {
		t.Fatalf("event %d keeps %d/%d/%d bytes, limit %d", i, len(got.Raw), len(got.Data), len(got.Name), limit)
	}
	prefix := func(g, w []byte) bool { return bytes.Equal(g, w[:min(len(w), len(g))]) && (trunc || len(g) == len(w)) }
	if !prefix(got.Raw, want.Raw) || !prefix(got.Data, want.Data) || (!trunc && !bytes.Equal(got.Name, want.Name)) {
		t.Fatalf("event %d:\n got raw %q data %q name %q\nwant raw %q data %q name %q", i, got.Raw, got.Data, got.Name, want.Raw, want.Data, want.Name)
	}
	if trunc && len(got.Raw) != limit {
		t.Fatalf("event %d: truncated raw holds %d bytes, want %d", i, len(got.Raw), limit)
	}
}
