package proxy

import (
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// clientWriter bounds every write to the client by an idle deadline: a
// write (at most writePiece bytes) or a flush that makes no progress for
// idle fails, and the call ends as client_cancelled. A stream that flows
// is never cut however long it runs, since each piece gets its own
// deadline.
type clientWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

// writePiece is the most written under one deadline.
const writePiece = 64 << 10

func newClientWriter(w http.ResponseWriter, idle time.Duration) *clientWriter {
	return &clientWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: idle}
}

func (c *clientWriter) extend() { _ = c.rc.SetWriteDeadline(time.Now().Add(c.idle)) }

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

// FlushError flushes under a deadline (http.ResponseController uses it).
func (c *clientWriter) FlushError() error {
	c.extend()
	return c.rc.Flush()
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
	done  atomic.Bool // the transport may read while the handler releases
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.done.Load() {
		return 0, io.EOF
	}
	d := time.Now().Add(b.idle)
	if !b.total.IsZero() && b.total.Before(d) {
		d = b.total
	}
	_ = b.rc.SetReadDeadline(d)
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
