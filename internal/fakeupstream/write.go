package fakeupstream

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"errors"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/tidwall/gjson"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/sse"
)

// keepAlive is the comment DeepSeek streams while a request waits.
const keepAlive = ": keep-alive\n\n"

// plan is an answer ready to write.
type plan struct {
	status int
	header http.Header
	// events holds the raw SSE events of a stream, or the one body of a
	// non-stream answer.
	events [][]byte
	stream bool
}

// replyPlan renders a Reply for the request body req.
func replyPlan(req []byte, rp Reply, seq int64) plan {
	if gjson.GetBytes(req, "stream").Bool() {
		h := http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}, "Cache-Control": {"no-cache"}}
		return plan{status: http.StatusOK, header: h, events: streamEvents(req, rp, seq), stream: true}
	}
	h := http.Header{"Content-Type": {"application/json"}}
	return plan{status: http.StatusOK, header: h, events: [][]byte{completionJSON(req, rp, seq)}}
}

// exchangePlan replays a recorded exchange's response.
func exchangePlan(ex *fixtures.Exchange) plan {
	h := ex.ResponseHeader.Clone()
	if h == nil {
		h = make(http.Header)
	}
	return plan{
		status: cmp.Or(ex.Status, http.StatusOK), header: h,
		events: bodyEvents(ex.ResponseBody, ex.Stream), stream: ex.Stream,
	}
}

// rawPlan writes a raw status and body.
func rawPlan(resp Response) plan {
	ct := cmp.Or(resp.ContentType, "application/json")
	stream := strings.HasPrefix(ct, "text/event-stream")
	return plan{
		status: cmp.Or(resp.Status, http.StatusOK), header: http.Header{"Content-Type": {ct}},
		events: bodyEvents(resp.Body, stream), stream: stream,
	}
}

// bodyEvents splits a stream body into its raw SSE events (every byte
// kept), or returns a non-stream body whole.
func bodyEvents(body []byte, stream bool) [][]byte {
	if !stream {
		return [][]byte{body}
	}
	var evs [][]byte
	r := sse.NewReader(bytes.NewReader(body))
	for {
		ev, err := r.Next()
		if err != nil {
			return evs // io.EOF: a bytes.Reader has no other error
		}
		evs = append(evs, bytes.Clone(ev.Raw))
	}
}

// writePlan writes p with the stream behaviour of resp.
func writePlan(w http.ResponseWriter, r *http.Request, resp Response, p plan) {
	h := w.Header()
	maps.Copy(h, p.header)
	if resp.Gzip {
		h.Set("Content-Encoding", "gzip")
		h.Del("Content-Length")
	}
	e := &eventWriter{ctx: r.Context(), w: w, rc: http.NewResponseController(w), resp: resp}
	if resp.Gzip {
		e.gz = gzip.NewWriter(w)
	}
	w.WriteHeader(p.status)
	if p.stream {
		e.writeStream(p.events)
	} else {
		e.writeBody(p.events[0])
	}
}

// eventWriter writes an answer piece by piece, flushing each, with the
// delays, stall and cut a Response asks for.
type eventWriter struct {
	ctx     context.Context
	w       http.ResponseWriter
	rc      *http.ResponseController
	gz      *gzip.Writer
	resp    Response
	wrote   bool // something was written: EventDelay applies from now on
	n       int  // events written, keep-alives not counted
	stalled bool
}

// writeStream writes keep-alives, then the events.
func (e *eventWriter) writeStream(events [][]byte) {
	if e.flush() != nil {
		return
	}
	for range e.resp.KeepAlives {
		if !e.send([]byte(keepAlive)) {
			return
		}
	}
	for _, ev := range events {
		if !e.stallIfDue() || !e.send(ev) {
			return
		}
		e.n++
		if e.resp.CutAfter > 0 && e.n >= e.resp.CutAfter {
			e.abort()
		}
	}
	if !e.stallIfDue() {
		return
	}
	if e.resp.CutAfter > 0 {
		e.abort()
	}
	e.close()
}

// writeBody writes a non-stream body after its keep-alive lines and stall;
// with CutAfter it writes half the body and drops the connection.
func (e *eventWriter) writeBody(body []byte) {
	for range e.resp.KeepAlives {
		if !e.send([]byte("\n")) {
			return
		}
	}
	if e.resp.Stall > 0 && !e.sleep(e.resp.Stall) {
		return
	}
	if e.resp.CutAfter > 0 {
		if e.send(body[:len(body)/2]) {
			e.abort()
		}
		return
	}
	if e.send(body) {
		e.close()
	}
}

// send writes b after EventDelay (from the second write on) and flushes.
// It reports false when the client is gone.
func (e *eventWriter) send(b []byte) bool {
	if e.wrote && !e.sleep(e.resp.EventDelay) {
		return false
	}
	e.wrote = true
	var err error
	if e.gz != nil {
		_, err = e.gz.Write(b)
	} else {
		_, err = e.w.Write(b)
	}
	return err == nil && e.flush() == nil
}

// flush pushes everything written so far to the client.
func (e *eventWriter) flush() error {
	if e.gz != nil {
		if err := e.gz.Flush(); err != nil {
			return err
		}
	}
	if err := e.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// stallIfDue pauses for Stall once, when StallAfter events are written.
// It reports false when the request was cancelled.
func (e *eventWriter) stallIfDue() bool {
	if e.resp.Stall <= 0 || e.stalled || e.n != e.resp.StallAfter {
		return e.ctx.Err() == nil
	}
	e.stalled = true
	return e.sleep(e.resp.Stall)
}

// sleep waits d or until the request is cancelled; it reports false in the
// latter case.
func (e *eventWriter) sleep(d time.Duration) bool {
	if d <= 0 {
		return e.ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-e.ctx.Done():
		return false
	}
}

// abort drops the connection after flushing what was written: net/http
// recovers http.ErrAbortHandler silently and closes the connection without
// ending the chunked body, so the client sees an unexpected EOF.
func (e *eventWriter) abort() {
	_ = e.flush()
	panic(http.ErrAbortHandler)
}

// close ends the gzip stream, if any.
func (e *eventWriter) close() {
	if e.gz != nil {
		_ = e.gz.Close()
	}
}
