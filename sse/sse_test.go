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

func FuzzReader(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\n: keep-alive\n\ndata: [DONE]\n\n"))
	f.Add([]byte("event: x\r\ndata:\r\n\r\n\n\ndata"))
	f.Fuzz(func(t *testing.T, in []byte) {
		evs, err := readAll(t, in)
		if !errors.Is(err, io.EOF) {
			t.Fatalf("err = %v", err)
		}
		var joined []byte
		for i, ev := range evs {
			if ev.Partial && i != len(evs)-1 {
				t.Fatalf("partial event %d is not last", i)
			}
			joined = append(joined, ev.Raw...)
		}
		if !bytes.Equal(joined, in) {
			t.Fatalf("raw bytes not preserved:\n got %q\nwant %q", joined, in)
		}
	})
}
