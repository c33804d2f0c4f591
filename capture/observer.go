package capture

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
)

// Where a record was taken: the outermost position of the pipeline.
const (
	whereWire    = "upstream-wire"    // exactly the bytes to and from upstream
	whereDecoded = "upstream-decoded" // the upstream's compressed body, decoded
	whereClient  = "client-request"   // the request as the client sent it
)

// Observer writes every call to the capture log, with the notes hooks
// make about it. It never blocks: the Writer's queue is bounded and counts
// what it drops. Headers are handed over as they are, without a copy:
// the proxy never changes the headers it gives its observers, and the
// Writer redacts them on its own goroutine.
type Observer struct {
	w              *Writer
	clientRequests bool
}

var (
	_ proxy.Observer  = (*Observer)(nil)
	_ proxy.Annotator = (*Observer)(nil)
)

// NewObserver returns the observer writing to w; clientRequests also
// records each request as the client sent it.
func NewObserver(w *Writer, clientRequests bool) *Observer {
	return &Observer{w: w, clientRequests: clientRequests}
}

// Annotate records a hook's note about the call.
func (o *Observer) Annotate(call *proxy.Call, where string, data []byte) {
	o.w.enqueueQuiet(queued{Record: Record{Kind: KindNote, Call: call.ID, Route: call.Route, Model: call.Model, Where: where, Time: time.Now(), Data: data}})
}

// Collectors are the writer's metrics.
func Collectors(w *Writer) []prometheus.Collector {
	stat := func(name, help string, f func(WriterStats) int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(f(w.Stats())) })
	}
	return []prometheus.Collector{
		stat("shaperproxy_capture_records_total", "Capture records written to disk.", func(s WriterStats) int64 { return s.Written }),
		stat("shaperproxy_capture_dropped_total", "Capture records dropped because the queue was full (traffic was not held up).", func(s WriterStats) int64 { return s.Dropped }),
		stat("shaperproxy_capture_lost_total", "Capture records lost to write errors (full or failing disk).", func(s WriterStats) int64 { return s.Lost }),
		stat("shaperproxy_capture_write_errors_total", "Failed capture writes, syncs and file creations.", func(s WriterStats) int64 { return s.WriteErrors }),
		stat("shaperproxy_capture_raw_bytes_total", "Bytes of captured records before storage.", func(s WriterStats) int64 { return s.BytesRaw }),
		stat("shaperproxy_capture_disk_bytes_total", "Bytes appended to capture segments.", func(s WriterStats) int64 { return s.BytesOnDisk }),
	}
}

// Request records the request as sent upstream (and, if configured, as
// the client sent it) and returns the sink for its response.
func (o *Observer) Request(call *proxy.Call, up *proxy.Upstream) proxy.ResponseSink {
	base := Record{
		Call: call.ID, Parent: call.Parent, Internal: call.Internal,
		Route: call.Route, Model: call.Model, Stream: call.Stream,
	}
	if o.clientRequests && !call.Retry {
		r := base
		r.Kind, r.Where, r.Offset = KindClientRequest, whereClient, 0
		r.Time = recordTime(call, 0)
		r.Method, r.URL, r.Header, r.Data = call.Method, call.Path, call.Header, call.ClientBody
		o.w.enqueueQuiet(requestQ(r, call.ClientView(), call.Hold())) // as the wire's below: the client body's view saves the writer a parse
	}
	r := base
	r.Kind, r.Where, r.Offset = KindRequest, whereWire, up.At
	r.Time = recordTime(call, r.Offset)
	r.Method, r.URL, r.Header, r.Data = up.Method, up.URL, up.Header, up.Body
	r.ReasoningShaped, r.ReasoningRaw = call.Reasoning.Shaped, call.Reasoning.Raw
	r.Purpose, r.Conversation = call.Purpose, call.Conversation
	// Queued in its place, without waking the writer (as all of a call's
	// records are: see the package doc). The proxy's view of the body,
	// when it is one, saves the writer reading it again. The body and the
	// view are the call's, held until the writer has encoded them.
	o.w.enqueueQuiet(requestQ(r, call.View, call.Hold()))
	// A stream's records go as they come (the rare non-stream answer to a
	// stream request is not held either).
	return &captureSink{w: o.w, base: base, call: call, where: whereWire, holds: !call.Stream}
}

// heldRecords is the room for the records of a non-stream answer held
// together. It comes from heldPool at the first record held, goes to the
// writer with them, and the writer puts it back once it has taken them
// (or dropped them): a call does not allocate it.
type heldRecords [maxHeldRecords]queued

var heldPool = sync.Pool{New: func() any { return new(heldRecords) }}

// putHeld clears a and puts it back in the pool (cleared, it keeps no
// record's header, strings or view alive).
func putHeld(a *heldRecords) {
	if a != nil {
		*a = heldRecords{}
		heldPool.Put(a)
	}
}

// captureSink records one response as it passes, and the usage it
// reports on its end record.
type captureSink struct {
	w     *Writer
	base  Record
	call  *proxy.Call
	where string
	seq   int
	// A non-stream answer's records (response, body, end) are handed to
	// the writer together when it ends, while its body is small (most
	// are): one hand-over instead of three. holds says the sink may hold
	// (not for a stream request), hold that it does now; held is the
	// records kept, in room (from heldPool; the writer's once handed over).
	holds, hold bool
	held        []queued
	heldBytes   int
	room        *heldRecords
}

// maxHeldBody is the most memory (pooled buffers counted whole) a sink
// holds of a non-stream body to hand over with its end, and
// maxHeldRecords the most records: past either the records go as they
// come, under the writer's queue bounds (a body trickled a byte a read
// must not pile up records outside them).
const (
	maxHeldBody    = 64 << 10
	maxHeldRecords = 4
)

// keep holds q, or enqueues it (and what was held) when the answer is not
// held or no longer fits.
func (s *captureSink) keep(q queued) {
	if n := q.held(); s.hold && s.heldBytes+int(n) <= maxHeldBody && len(s.held) < maxHeldRecords {
		if s.room == nil {
			s.room = heldPool.Get().(*heldRecords)
			s.held = s.room[:0]
		}
		if q.Time.IsZero() {
			q.Time = time.Now()
		}
		s.held = append(s.held, q)
		s.heldBytes += int(n)
		return
	}
	s.release()
	s.w.enqueueQuiet(q)
}

// release enqueues what is held, together, and holds nothing more.
func (s *captureSink) release() {
	if len(s.held) > 0 { // room is taken with the first record held: none without
		s.w.enqueueBatch(s.held, s.room) // the room is the writer's now (queued quietly)
	}
	s.hold, s.held, s.room = false, nil, nil
}

func (s *captureSink) record(kind Kind, at time.Duration) Record {
	r := s.base
	r.Kind, r.Offset, r.Where, r.Time = kind, at, s.where, recordTime(s.call, at)
	return r
}

// recordTime is the wall clock at offset at into call: its start plus
// the offset (measured on the monotonic clock), which spares a record
// the clock's reading (two of it, wall and monotonic, where an offset
// takes one). A call without a start leaves it to the writer.
func recordTime(call *proxy.Call, at time.Duration) time.Time {
	if call.Start.IsZero() {
		return time.Time{}
	}
	return call.Start.Add(at)
}

func (s *captureSink) Response(info *proxy.ResponseInfo) {
	if info.Encoded {
		s.where = whereDecoded
	}
	at := info.At
	if at == 0 { // an internal call's answer, told when it came
		at = s.call.Since()
	}
	r := s.record(KindResponse, at)
	r.Status, r.Header, r.Stream = info.Status, info.Header, info.Stream
	s.hold = !info.Stream && s.holds
	s.keep(queued{Record: r})
}

// Event records one event. An event longer than the proxy keeps comes
// truncated (its beginning, at most the proxy's max event bytes): the
// record holds that beginning, its Bytes the event's whole size and its
// Err says it was cut, so nothing reads it as the whole event.
func (s *captureSink) Event(ev *sse.Event, seq int, at time.Duration) {
	r := s.record(KindEvent, at)
	r.Seq = seq
	if ev.Truncated {
		r.Bytes = ev.Size
		r.Err = fmt.Sprintf("%s: %d of %d bytes kept", TruncatedErr, len(ev.Raw), ev.Size)
	}
	s.w.enqueueQuiet(copied(r, ev.Raw)) // a pooled copy: no allocation per event
}

// TruncatedErr starts the Err of an event record that holds only the
// beginning of its event (Bytes is then the event's whole size).
const TruncatedErr = "truncated"

func (s *captureSink) Body(p []byte) {
	r := s.record(KindBody, s.call.Since())
	r.Seq = s.seq
	s.seq++
	s.keep(copied(r, p))
}

func (s *captureSink) End(end proxy.End) {
	r := s.record(KindEnd, end.Duration)
	if end.Duration == 0 {
		r.Time = time.Time{} // not measured: the time it is taken
	}
	r.Status, r.Outcome, r.Bytes, r.Events, r.Err, r.Usage = end.Status, string(end.Outcome), end.Bytes, end.Events, end.Err, end.Usage
	r.Purpose, r.Conversation = s.call.Purpose, s.call.Conversation
	if s.hold {
		s.keep(queued{Record: r})
		s.release()
		return
	}
	s.w.enqueueQuiet(queued{Record: r})
}
