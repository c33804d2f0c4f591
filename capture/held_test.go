package capture

import (
	"bytes"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/shaperproxy/shaperproxy/conv"
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
		if cs := sink.(*captureSink); size < 32<<10 && len(cs.held) == 0 { // one piece: held (more pieces count their pooled buffers whole)
			t.Fatalf("size %d: nothing held before the end", size)
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

// TestStreamSinkHoldsNothing: a stream request's sink takes no room for
// held records (a stream's records go as they come), and the non-stream
// answer such a request can get (an error body) is still recorded whole,
// in order.
func TestStreamSinkHoldsNothing(t *testing.T) {
	w, dir := openTest(t, Options{})
	o := NewObserver(w, false)
	call := &proxy.Call{ID: "s", Route: "r", Chat: true, Stream: true, Start: time.Now()}
	sent := time.Hour + 1500*time.Microsecond
	sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{"stream":true}`), At: sent})
	if cs := sink.(*captureSink); cs.room != nil {
		t.Fatal("a stream request's sink has room to hold records")
	}
	sink.Response(&proxy.ResponseInfo{Status: 400})
	sink.Body([]byte(`{"error":"bad"}`))
	if cs := sink.(*captureSink); len(cs.held) != 0 || cs.room != nil {
		t.Fatal("a stream request's sink holds records")
	}
	sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 400})
	mustFlush(t, w)
	var kinds []string
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		kinds = append(kinds, l.Record.Kind.String())
	}
	if got := strings.Join(kinds, " "); got != "request response body end" {
		t.Fatalf("records %q", got)
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
	if st := w.Stats(); st.Dropped != 3 || st.Enqueued != 1 {
		t.Fatalf("stats %+v: want the request enqueued and the answer's 3 records dropped", st)
	}
}

// TestRequestRecordQuiet: the request record is queued as the request
// goes upstream, in its place, without waking the writer: nothing is
// written at once, and a lone record is written within FlushInterval
// of being queued (the quiet timer, and its frame's timer counted from
// then) without any other record; then a later call's
// records and the first call's answer follow in the order they were
// queued. Quiet records also wake the writer once batchMin of them wait.
func TestRequestRecordQuiet(t *testing.T) {
	// The check 50 ms in asserts only while the interval has not passed
	// (on a loaded machine it could have).
	const interval = 300 * time.Millisecond
	w, dir := openTest(t, Options{FlushInterval: interval})
	o := NewObserver(w, false)
	up := &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{"messages":[]}`)}
	answer := func(s proxy.ResponseSink) {
		s.Response(&proxy.ResponseInfo{Status: 200})
		s.Body([]byte(`{"choices":[]}`))
		s.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
	}
	start := time.Now()
	a := o.Request(&proxy.Call{ID: "a", Route: "r", Chat: true, Start: time.Now()}, up)
	time.Sleep(50 * time.Millisecond)
	if st := w.Stats(); st.Enqueued != 1 || (st.Written != 0 || w.queued.Load() == 0) && time.Since(start) < interval {
		t.Fatalf("stats %+v, %d bytes queued: want the request still waiting in the queue (the writer not woken)", st, w.queued.Load())
	}
	for w.Stats().Written == 0 {
		// Written one interval after it was queued (the quiet timer, then
		// its frame's timer counted from when it was queued), not two.
		if time.Since(start) > interval*8/5 {
			t.Fatalf("stats %+v: a lone quiet record waited past %v", w.Stats(), interval*8/5)
		}
		time.Sleep(10 * time.Millisecond)
	}
	answer(o.Request(&proxy.Call{ID: "b", Route: "r", Chat: true, Start: time.Now()}, up))
	answer(a)
	wantCallRecords(t, w, dir, "a:request b:request b:response b:body b:end a:response a:body a:end")

	w2, _ := openTest(t, Options{FlushInterval: time.Hour}) // the quiet timer out of the way
	o2 := NewObserver(w2, false)
	for i := range batchMin {
		o2.Request(&proxy.Call{ID: fmt.Sprint(i), Route: "r", Chat: true, Start: time.Now()}, up)
	}
	deadline := time.Now().Add(5 * time.Second)
	for w2.queued.Load() > 0 { // taken by the writer (their frame waits for its interval)
		if time.Now().After(deadline) {
			t.Fatalf("%d quiet records waiting did not wake the writer", batchMin)
		}
		time.Sleep(5 * time.Millisecond)
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

// TestQuietRecordsDoNotStall: quiet request records that fill the queue
// (its room, or its bytes) wake the writer, so the records that follow
// are not all dropped while it sleeps.
func TestQuietRecordsDoNotStall(t *testing.T) {
	for _, opts := range []Options{
		{QueueSize: 8, FlushInterval: time.Hour},        // fewer places than batchMin
		{QueueBytes: 1 << 20, FlushInterval: time.Hour}, // two big requests fill the bytes
	} {
		// The quiet timer is an hour away: only the wakes under test can
		// make the writer take the records.
		w, _ := openTest(t, opts)
		o := NewObserver(w, false)
		body := bytes.Repeat([]byte("x"), 512<<10)
		for i := range 8 {
			o.Request(&proxy.Call{ID: fmt.Sprint(i), Route: "r", Chat: true, Start: time.Now()}, &proxy.Upstream{Method: "POST", URL: "http://up/", Body: body})
		}
		deadline := time.Now().Add(5 * time.Second)
		taken := func(what string) {
			for w.queued.Load() > 0 || len(w.q) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("%+v: stats %+v: %s not taken", opts, w.Stats(), what)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		taken("the quiet records were")
		// The writer is awake to the queue: a record now goes through.
		w.Enqueue(Record{Kind: KindNote, Call: "n", Data: []byte(`{}`)})
		taken("a later record was")
		// Taken, and written: the note at least (some big requests may
		// have been dropped at the byte bound).
		mustFlush(t, w)
		if st := w.Stats(); st.Written < 1 || st.Written+st.Dropped != 9 {
			t.Fatalf("%+v: stats %+v", opts, st)
		}
	}
}

// TestHeldRoomGoesBack: the room a non-stream answer's records were held
// in goes back cleared (to the pool, for the next call) once the writer
// has taken them, and once they are dropped; it keeps no record alive.
func TestHeldRoomGoesBack(t *testing.T) {
	for _, closed := range []bool{false, true} {
		w, _ := openTest(t, Options{})
		o := NewObserver(w, false)
		call := &proxy.Call{ID: "c", Route: "r", Chat: true, Start: time.Now()}
		sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{}`)})
		sink.Response(&proxy.ResponseInfo{Status: 200, Header: map[string][]string{"A": {"b"}}})
		sink.Body([]byte(`{"choices":[]}`))
		room := sink.(*captureSink).room
		if room == nil || room[0].Kind != KindResponse {
			t.Fatalf("closed=%v: the response record is not held in a room", closed)
		}
		if closed {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
		if !closed {
			mustFlush(t, w) // the writer has taken the records: after this it is done with the room
		}
		if !reflect.ValueOf(*room).IsZero() {
			t.Errorf("closed=%v: the room was not cleared and given back: %+v", closed, room[0].Record)
		}
		if cs := sink.(*captureSink); cs.room != nil || cs.held != nil {
			t.Errorf("closed=%v: the sink still refers to the room it handed over", closed)
		}
		// Given back once: two takes from the pool never get the same
		// room (a room put back twice would be handed to two calls).
		a, b := heldPool.Get().(*heldRecords), heldPool.Get().(*heldRecords)
		if a == b {
			t.Errorf("closed=%v: the room was put back twice", closed)
		}
		putHeld(a)
		putHeld(b)
	}
}

// TestHeldRoomReused: rooms go round (calls on several goroutines, each
// room reused many times), and every call's records are still its own,
// whole and in order.
func TestHeldRoomReused(t *testing.T) {
	w, dir := openTest(t, Options{})
	o := NewObserver(w, false)
	const workers, calls = 4, 150
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				id := fmt.Sprintf("c%d-%d", g, i)
				call := &proxy.Call{ID: id, Route: "r", Chat: true, Start: time.Now()}
				sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{}`)})
				sink.Response(&proxy.ResponseInfo{Status: 200})
				sink.Body([]byte(`{"id":"` + id + `",`))
				sink.Body([]byte(`"choices":[]}`))
				sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200, Err: id})
			}
		}()
	}
	wg.Wait()
	mustFlush(t, w)
	kinds, bodies, ends := map[string]string{}, map[string]string{}, map[string]string{}
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		r := l.Record
		kinds[r.Call] += r.Kind.String() + " "
		switch r.Kind {
		case KindBody:
			bodies[r.Call] += string(r.Data)
		case KindEnd:
			ends[r.Call] = r.Err
		}
	}
	if len(kinds) != workers*calls {
		t.Fatalf("%d calls in the log, want %d", len(kinds), workers*calls)
	}
	for id, k := range kinds {
		if k != "request response body body end " || bodies[id] != `{"id":"`+id+`","choices":[]}` || ends[id] != id {
			t.Fatalf("call %s: records %q, body %q, end %q", id, k, bodies[id], ends[id])
		}
	}
}

// TestQueueCountsViews: a queued request record counts the view it keeps
// beside its body (message structs, decoded strings) against the queue's
// bound: a body of many small messages holds several times its bytes
// there, and counting the body alone let the queue hold that much more
// than queue_bytes. The count goes back to nothing once written.
func TestQueueCountsViews(t *testing.T) {
	w, _ := openTest(t, Options{FlushInterval: time.Hour}) // a quiet record stays queued
	o := NewObserver(w, false)
	const n = 5000
	body := []byte(`{"model":"m","messages":[` + strings.Repeat(`{"role":"user","content":""},`, n-1) + `{"role":"user","content":""}]}`)
	view, err := conv.ParseRequest(body)
	if err != nil {
		t.Fatal(err)
	}
	o.Request(&proxy.Call{ID: "v", Route: "r", Chat: true, View: view, Start: time.Now()}, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: body})
	least := int64(len(body) + n*int(unsafe.Sizeof(conv.Message{})))
	if got := w.queued.Load(); got < least {
		t.Fatalf("%d bytes counted for a %d-byte body of %d messages, want at least %d (the view's messages)", got, len(body), n, least)
	}
	mustFlush(t, w)
	if got := w.queued.Load(); got != 0 {
		t.Fatalf("%d bytes still counted after the record was written", got)
	}
}

// TestQueueCountsRoom: the queue's bound counts the room a non-stream
// answer's records are handed over in (about 1.6 KB, more than the
// records of a small answer hold), and the count goes back to zero once
// the writer has taken them, or when they are dropped (the writer
// closed, or the queue's bytes full: a request record waits in it).
func TestQueueCountsRoom(t *testing.T) {
	for _, c := range []string{"taken", "closed", "full"} {
		closed := c == "closed"
		opts := Options{FlushInterval: time.Hour}
		if c == "full" {
			opts.QueueBytes = 1000
		}
		w, _ := openTest(t, opts)
		o := NewObserver(w, false)
		sink := o.Request(&proxy.Call{ID: "c", Route: "r", Chat: true, Start: time.Now()}, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{}`)})
		sink.Response(&proxy.ResponseInfo{Status: 200})
		sink.Body([]byte(`{"choices":[]}`))
		held := sink.(*captureSink).held
		batch := held[0]
		batch.rest, batch.room = held[1:], sink.(*captureSink).room
		if got := batch.held(); got < roomBytes {
			t.Fatalf("a held answer counts %d bytes, less than its room's %d", got, roomBytes)
		}
		if closed {
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		before := w.Stats().Dropped
		sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
		if dropped := w.Stats().Dropped - before; (c == "taken") != (dropped == 0) {
			t.Fatalf("%s: %d records dropped at the end", c, dropped)
		}
		if !closed {
			mustFlush(t, w)
		}
		if got := w.queued.Load(); got != 0 {
			t.Fatalf("%s: %d bytes still counted once the records were taken or dropped", c, got)
		}
	}
}

// TestCallRecordsQuiet: none of a call's records wakes the writer (a
// non-stream answer handed over at its end, a stream's events, its end):
// they wait in the queue, in order, until something else does (here a
// Flush), and then all of them are written.
func TestCallRecordsQuiet(t *testing.T) {
	w, dir := openTest(t, Options{FlushInterval: time.Hour}) // the quiet timer out of the way
	o := NewObserver(w, false)
	up := &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{"messages":[]}`)}
	a := o.Request(&proxy.Call{ID: "a", Route: "r", Chat: true, Start: time.Now()}, up)
	a.Response(&proxy.ResponseInfo{Status: 200})
	a.Body([]byte(`{"choices":[]}`))
	a.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
	s := o.Request(&proxy.Call{ID: "s", Route: "r", Chat: true, Stream: true, Start: time.Now()}, up)
	s.Response(&proxy.ResponseInfo{Status: 200, Stream: true})
	for i := range 3 {
		s.Event(&sse.Event{Raw: []byte("data: {}\n\n"), Data: []byte("{}"), HasData: true}, i, time.Millisecond)
	}
	s.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
	time.Sleep(50 * time.Millisecond)
	if got := w.queued.Load(); got == 0 {
		t.Fatal("the writer took the calls' records: one of them woke it")
	}
	wantCallRecords(t, w, dir, "a:request a:response a:body a:end s:request s:response s:event s:event s:event s:end")
}

// wantCallRecords flushes w and checks that the log in dir holds exactly
// want ("call:kind" of each record, in order).
func wantCallRecords(t *testing.T, w *Writer, dir, want string) {
	t.Helper()
	mustFlush(t, w)
	var got []string
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		got = append(got, l.Record.Call+":"+l.Record.Kind.String())
	}
	if strings.Join(got, " ") != want {
		t.Fatalf("records %q, want %q", strings.Join(got, " "), want)
	}
}

// TestQueueCountsHeaders: the queue's byte bound counts a record's header
// (a client's may be a megabyte) and strings, not its data alone: two
// requests of 40 KB headers and two-byte bodies do not both fit a 64 KiB
// queue; and what was counted is given back when the records are taken.
func TestQueueCountsHeaders(t *testing.T) {
	w, _ := openTest(t, Options{FlushInterval: time.Hour, QueueBytes: 64 << 10})
	o := NewObserver(w, false)
	h := http.Header{"X-Big": {strings.Repeat("h", 40<<10)}}
	for _, id := range []string{"a", "b"} {
		o.Request(&proxy.Call{ID: id, Route: "r", Chat: true, Start: time.Now()},
			&proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Header: h, Body: []byte(`{}`)})
	}
	if st := w.Stats(); st.Dropped != 1 {
		t.Fatalf("%d records dropped, want the second request's", st.Dropped)
	}
	if got := w.queued.Load(); got < 40<<10 {
		t.Fatalf("the queued request counts %d bytes, less than its header", got)
	}
	mustFlush(t, w)
	if got := w.queued.Load(); got != 0 {
		t.Fatalf("%d bytes still counted once the records were taken", got)
	}
}

// TestRecordTimesFromCallStart: a call's records are timed by its start
// plus their offsets (no clock read a record), the request's by when it was
// handed to the transport (Upstream.At: the observers may be told later); an
// end whose duration was not measured is timed when it is taken.
func TestRecordTimesFromCallStart(t *testing.T) {
	w, dir := openTest(t, Options{})
	o := NewObserver(w, false)
	start := time.Now().Add(-time.Hour).Round(time.Microsecond)
	call := &proxy.Call{ID: "t", Route: "r", Chat: true, Stream: true, Start: start}
	sent := time.Hour + 1500*time.Microsecond
	sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{"stream":true}`), At: sent})
	sink.Response(&proxy.ResponseInfo{Status: 200, Stream: true})
	sink.Event(&sse.Event{Raw: []byte("data: {}\n\n")}, 0, 1500*time.Millisecond)
	sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200, Duration: 2 * time.Second})
	undated := &proxy.Call{ID: "u", Route: "r", Chat: true, Start: start}
	before := time.Now()
	o.Request(undated, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{}`)}).End(proxy.End{Outcome: proxy.OutcomeComplete})
	mustFlush(t, w)
	n := 0
	for _, l := range scanAll(t, openReaderTest(t, dir)) {
		r := l.Record
		switch {
		case r.Call == "t":
			n++
			if want := start.Add(r.Offset); !r.Time.Equal(want) || r.Offset < time.Hour && r.Kind != KindEvent && r.Kind != KindEnd {
				t.Errorf("%s record: time %v offset %v, want the call's start plus the offset (%v)", r.Kind, r.Time, r.Offset, want)
			}
			if r.Kind == KindRequest && r.Offset != sent {
				t.Errorf("request record at %v, want when it was sent (%v)", r.Offset, sent)
			}
		case r.Kind == KindEnd:
			n++
			if r.Time.Before(before) {
				t.Errorf("undated end timed %v, before it was taken (%v)", r.Time, before)
			}
		}
	}
	if n != 5 {
		t.Fatalf("%d records checked, want 5", n)
	}
}

// TestCallRecordsSlowStart: a call whose upstream request went out more
// than a minute after its start (a slow upload, slow transforms) still
// shows its client request, timed at the start.
func TestCallRecordsSlowStart(t *testing.T) {
	w, dir := openTest(t, Options{})
	o := NewObserver(w, true)
	call := &proxy.Call{
		ID: "slow", Route: "r", Chat: true, Start: time.Now().Add(-2 * time.Minute),
		Method: "POST", Path: "/v1/chat/completions", ClientBody: []byte(`{"a":1}`),
	}
	sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{"a":1}`)})
	sink.Response(&proxy.ResponseInfo{Status: 200})
	sink.Body([]byte(`{}`))
	sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200, Duration: call.Since()})
	mustFlush(t, w)
	recs, err := openReaderTest(t, dir).CallRecords("slow")
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, l := range recs {
		kinds = append(kinds, l.Record.Kind.String())
	}
	if got, want := strings.Join(kinds, " "), "client_request request response body end"; got != want {
		t.Fatalf("CallRecords: %q, want %q", got, want)
	}
}

// TestResponseRecordAtHeader: the response record is dated when the
// upstream's header came (ResponseInfo.At), though the proxy tells the
// sink of it later (once a copied body's first bytes are on their way);
// an answer told without a time (an internal call's) is dated when told.
func TestResponseRecordAtHeader(t *testing.T) {
	w, _ := openTest(t, Options{})
	o := NewObserver(w, false)
	for _, at := range []time.Duration{7 * time.Millisecond, 0} {
		start := time.Now().Add(-time.Second)
		call := &proxy.Call{ID: fmt.Sprint("c", at), Route: "r", Chat: true, Start: start}
		sink := o.Request(call, &proxy.Upstream{Method: "POST", URL: "http://up/v1/chat/completions", Body: []byte(`{}`)})
		sink.Response(&proxy.ResponseInfo{Status: 200, At: at})
		r := sink.(*captureSink).room[0].Record
		switch {
		case at > 0 && (r.Offset != at || !r.Time.Equal(start.Add(at))):
			t.Errorf("the response record is at %v (%v), want the header's %v", r.Offset, r.Time, at)
		case at == 0 && r.Offset < time.Second:
			t.Errorf("an answer told without a time is at %v, want when told (a second or more into the call)", r.Offset)
		}
		sink.End(proxy.End{Outcome: proxy.OutcomeComplete, Status: 200})
	}
}
