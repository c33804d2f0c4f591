package capture

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
)

// TestHeldAnswerRecords: a non-stream answer's records are handed over
// together at its end; whatever its size, the log holds every one, in
// order (response, the body pieces as they came, end), with the body
// whole and each record's time when it was taken.
func TestHeldAnswerRecords(t *testing.T) {
	for _, size := range []int{300, maxHeldBody - 10, 3 * maxHeldBody} {
		w, dir := openTest(t, Options{})
		o := NewObserver(w, false)
		call := &proxy.Call{ID: "c", Route: "r", Model: "m", Chat: true, Start: time.Now()}
		sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{"messages":[]}`)})
		sink.Response(&proxy.ResponseInfo{Status: 200})
		body := []byte(`{"choices":[{"message":{"content":"` + strings.Repeat("x", size) + `"}}]}`)
		for rest := body; len(rest) > 0; {
			k := min(32<<10, len(rest))
			sink.Body(rest[:k])
			rest = rest[k:]
		}
		sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200, Bytes: int64(len(body))})
		mustFlush(t, w)
		var kinds []string
		var got []byte
		var last time.Time
		for _, l := range scanAll(t, openReaderTest(t, dir)) {
			kinds = append(kinds, l.Record.Kind.String())
			if l.Record.Kind == KindBody {
				got = append(got, l.Record.Data...)
			}
			if l.Record.Time.Before(last) {
				t.Errorf("size %d: %s record's time %v before the previous one's", size, l.Record.Kind, l.Record.Time)
			}
			last = l.Record.Time
		}
		pieces := (len(body) + 32<<10 - 1) / (32 << 10)
		want := "request response" + strings.Repeat(" body", pieces) + " end"
		if strings.Join(kinds, " ") != want || !bytes.Equal(got, body) {
			t.Errorf("size %d: records %q (body %d of %d bytes), want %q", size, kinds, len(got), len(body), want)
		}
		if st := w.Stats(); st.Enqueued != int64(3+pieces) || st.Written != st.Enqueued || st.Dropped != 0 {
			t.Errorf("size %d: stats %+v, want %d records enqueued and written", size, st, 3+pieces)
		}
	}
}

// TestHeldAnswerDropped: an answer held together and refused (here the
// writer is closed) is counted as dropped record by record, and its
// buffers go back.
func TestHeldAnswerDropped(t *testing.T) {
	w, _ := openTest(t, Options{})
	o := NewObserver(w, false)
	call := &proxy.Call{ID: "c", Route: "r", Chat: true, Start: time.Now()}
	sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions"})
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	sink.Response(&proxy.ResponseInfo{Status: 200})
	sink.Body(bytes.Repeat([]byte("y"), 4000))
	sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
	if st := w.Stats(); st.Dropped != 4 || st.Enqueued != 0 {
		t.Fatalf("stats %+v: want the request and the answer's 3 records, held together, dropped", st)
	}
}

// TestRequestRecordWaits: the request record is handed to the writer with
// the answer's header at the earliest (the writer is not woken while the
// request goes upstream): with a non-stream answer's records at its end,
// before a stream's first event, and with the end when no answer came.
// Each time it comes first, with the time it was taken.
func TestRequestRecordWaits(t *testing.T) {
	for _, tc := range []struct {
		name   string
		answer func(proxy.ResponseSink)
		want   string
	}{
		{"non-stream", func(s proxy.ResponseSink) {
			s.Response(&proxy.ResponseInfo{Status: 200})
			s.Body([]byte(`{"choices":[]}`))
		}, "request response body end"},
		{"stream", func(s proxy.ResponseSink) {
			s.Response(&proxy.ResponseInfo{Status: 200, Stream: true})
			s.Event(&sse.Event{Raw: []byte("data: {}\n\n"), Data: []byte("{}"), HasData: true}, 0, time.Millisecond)
		}, "request response event end"},
		{"no answer", func(proxy.ResponseSink) {}, "request end"},
	} {
		w, dir := openTest(t, Options{})
		o := NewObserver(w, false)
		call := &proxy.Call{ID: "c", Route: "r", Chat: true, Start: time.Now()}
		before := time.Now()
		sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{"messages":[]}`)})
		if st := w.Stats(); st.Enqueued != 0 {
			t.Fatalf("%s: %d records enqueued before the answer", tc.name, st.Enqueued)
		}
		time.Sleep(2 * time.Millisecond)
		tc.answer(sink)
		sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
		mustFlush(t, w)
		var kinds []string
		for i, l := range scanAll(t, openReaderTest(t, dir)) {
			kinds = append(kinds, l.Record.Kind.String())
			if i == 0 && (l.Record.Time.Before(before) || !l.Record.Time.Before(before.Add(2*time.Millisecond))) {
				t.Errorf("%s: request record's time %v, want when the request was sent (%v)", tc.name, l.Record.Time, before)
			}
		}
		if got := strings.Join(kinds, " "); got != tc.want {
			t.Errorf("%s: records %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestHeldAnswerTrickled: a non-stream body that comes a byte a read is
// not piled up in the sink outside the writer's queue bounds: the sink
// holds at most maxHeldRecords records and maxHeldBody of buffers, and
// the rest goes through the queue as it comes.
func TestHeldAnswerTrickled(t *testing.T) {
	w, _ := openTest(t, Options{})
	o := NewObserver(w, false)
	call := &proxy.Call{ID: "c", Route: "r", Chat: true, Start: time.Now()}
	sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions"})
	sink.Response(&proxy.ResponseInfo{Status: 200})
	cs := sink.(*captureSink)
	for i := range 2000 {
		sink.Body([]byte{' '})
		if len(cs.held) > maxHeldRecords || cs.heldBytes > maxHeldBody {
			t.Fatalf("after %d pieces the sink holds %d records, %d bytes", i+1, len(cs.held), cs.heldBytes)
		}
	}
	sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
	mustFlush(t, w)
	if st := w.Stats(); st.Enqueued+st.Dropped != 2+2000+1 {
		t.Fatalf("stats %+v: want every record enqueued or counted dropped", st)
	}
}
