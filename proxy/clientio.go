package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// clientWriter bounds every write to the client by an idle deadline: a
// write (at most writePiece bytes) or a flush that makes no progress for
// idle (up to idle/8 more) fails, and the call ends as client_cancelled.
// A stream that flows is never cut however long it runs, since each piece
// gets its own deadline.
type clientWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
	dl   deadline
	call *Call // notes its first flush (Call.clientFirst)
}

// writePiece is the most written under one deadline.
const writePiece = 64 << 10

func newClientWriter(w http.ResponseWriter, idle time.Duration, call *Call) *clientWriter {
	return &clientWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: idle, call: call}
}

func (c *clientWriter) extend() {
	if t, ok := c.dl.next(monoNow(), c.idle, time.Time{}); ok {
		_ = c.rc.SetWriteDeadline(t)
	}
}

// monoNow is the time now for deadlines and idle times: time.Now reads
// the wall clock and the monotonic one, this only the monotonic one
// (added to a reading of both taken once), and a deadline with a
// monotonic reading is kept by that one. It is not a wall-clock time to
// record (the wall clock may be set meanwhile).
func monoNow() time.Time { return clockBase.Add(time.Since(clockBase)) }

var clockBase = time.Now()

// deadline spares the connection a deadline change per read or write
// (each one takes the poller's lock and moves a runtime timer; a small
// request made five): a new deadline is idle + idle/8 away, and it is
// moved again only once less than idle is left. An operation is then cut
// after between idle and 9/8 idle without progress. The zero deadline is
// unset.
type deadline struct{ at time.Time }

// next returns the deadline to set for an operation starting at now, and
// false when the one set still leaves idle; a set total caps it.
func (d *deadline) next(now time.Time, idle time.Duration, total time.Time) (time.Time, bool) {
	want := now.Add(idle)
	if !total.IsZero() && total.Before(want) {
		if d.at.Equal(total) {
			return total, false
		}
		d.at = total
		return total, true
	}
	if !d.at.IsZero() && !d.at.Before(want) {
		return d.at, false
	}
	d.at = want.Add(idle / 8)
	if !total.IsZero() && total.Before(d.at) {
		d.at = total
	}
	return d.at, true
}

// Write writes p piece by piece, each under its own deadline.
func (c *clientWriter) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		n := min(len(p), writePiece)
		c.extend()
		k, err := c.ResponseWriter.Write(p[:n])
		written += k
		if err != nil {
			return written, err
		}
		p = p[n:]
	}
	return written, nil
}

// FlushError flushes under a deadline (http.ResponseController uses it),
// and notes when the first flush put the answer's first bytes on their
// way.
func (c *clientWriter) FlushError() error {
	c.extend()
	err := c.rc.Flush()
	if err == nil && c.call.clientFirst.Load() == 0 {
		c.call.clientFirst.CompareAndSwap(0, int64(max(c.call.Since(), 1)))
	}
	return err
}

// Flush is FlushError for callers that want an http.Flusher.
func (c *clientWriter) Flush() { _ = c.FlushError() }

// Unwrap gives http.ResponseController the connection's writer.
func (c *clientWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// bodyReader reads a request body with a deadline on each read (idle
// after the previous one, and never past total when set), and clears the
// connection's read deadline when the body has been read: the server's
// own watch for the client leaving must not time out.
type bodyReader struct {
	r     io.Reader
	rc    *http.ResponseController
	idle  time.Duration
	total time.Time   // zero: no overall bound
	dl    deadline    // read by one goroutine at a time (the handler's, then the transport's)
	done  atomic.Bool // the transport may read while the handler releases
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.done.Load() {
		return 0, io.EOF
	}
	if d, ok := b.dl.next(monoNow(), b.idle, b.total); ok {
		_ = b.rc.SetReadDeadline(d)
	}
	n, err := b.r.Read(p)
	if err != nil {
		b.release()
	}
	return n, err
}

// release clears the read deadline; safe to call more than once.
func (b *bodyReader) release() {
	if b.done.CompareAndSwap(false, true) {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}
