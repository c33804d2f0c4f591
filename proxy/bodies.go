package proxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
)

// bodies are a call's large request bodies — the client's, read into a
// buffer of internal/bigbuf, and each transform's output, made there by
// conv.ApplyEdits — which the call gives back to bigbuf's free list when
// it ends and no Hold is left, so that the next large request takes them
// instead of a fresh megabyte (faulted in page by page, cleared, and
// bringing the next collection closer).
//
// The views of a call alias its bodies: a view made by conv.Request.Apply
// keeps the strings of the body it was applied to, so the bodies go back
// together, never one alone.
type bodies struct {
	// n is the Holds not released, less one once the call ended: the
	// bodies go back when it reaches -1 (the call ended, no Hold left).
	// Its zero value is a call running with no Hold.
	n    atomic.Int32
	bufs [][]byte // appended by the handler's goroutine only, before the call ends
	// view is the call's last view when a transform made it (not the
	// client's, which the parse cache keeps): its message array goes
	// back with the bodies it aliases (conv.Request.Recycle).
	view *conv.Request
}

// own makes b one of the call's bodies, given back with them: the call
// takes over the reference of whoever made it (the proxy's body read, a
// transform's output). A body that is not a bigbuf buffer, or is already
// the call's, is left alone.
func (c *Call) own(b []byte) {
	if cap(b) < bigbuf.MinSize || c.owns(b) {
		return
	}
	c.bodies.bufs = append(c.bodies.bufs, b)
}

// owns reports whether b is one of the call's bodies.
func (c *Call) owns(b []byte) bool {
	return cap(b) >= bigbuf.MinSize && slices.ContainsFunc(c.bodies.bufs, func(x []byte) bool { return sameBuffer(x, b) })
}

// sameBuffer reports whether a and b start at the same byte.
func sameBuffer(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:1][0] == &b[:1][0]
}

// sameBytes reports whether a and b are the same bytes in memory: the
// same start and length (two empty slices are).
func sameBytes(a, b []byte) bool { return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) }

// Hold keeps the call's request bodies — ClientBody, the bodies the
// transforms return (those returned after the Hold too), and so the
// strings of every view of them — from being reused when the call ends,
// until it is released. An observer or hook that reads them after the
// call (the capture writer, a branch that runs beside the call) takes a
// Hold while the call runs — not after it ended — and releases it exactly
// once; everything else must not keep a byte or a string of them past the
// call's end without copying it.
func (c *Call) Hold() Hold {
	if c.bodies.n.Add(1) <= 0 {
		panic("proxy: Call.Hold after the call's bodies went back")
	}
	return Hold{&c.bodies}
}

// Hold is a hold on a call's bodies (Call.Hold). The zero Hold holds
// nothing.
type Hold struct{ b *bodies }

// Release ends the hold.
func (h Hold) Release() {
	if h.b != nil {
		h.b.release()
	}
}

// releaseBodies ends the call's own use of its bodies (forward's last
// step): they go back now, or with the last Hold, and the view the
// transforms left with them.
func (c *Call) releaseBodies() {
	c.settle() // done beside the trip, unless the call ended before it
	if c.View != c.clientView {
		c.bodies.view = c.View
	}
	c.bodies.release()
}

// release drops one reference; the last gives every body back.
func (b *bodies) release() {
	switch n := b.n.Add(-1); {
	case n > -1:
		return
	case n < -1:
		panic("proxy: a call's bodies released more often than held")
	}
	if b.view != nil {
		b.view.Recycle()
		b.view = nil
	}
	for i, buf := range b.bufs {
		bigbuf.Release(buf)
		b.bufs[i] = nil
	}
}

// heldBody is an upstream request's body read from one of the call's
// bodies: it holds them until the transport closes it, which may be after
// RoundTrip returned (http.Transport writes from a goroutine of its own,
// and so does the h1Transport for what is left of a large body once an
// answer came before the upstream took it all), and from another
// goroutine than the one reading (HTTP/2 closes a body whose answer came
// early while its writer may be in a Read): a Read and the Close are
// serialised, and a Read after the Close reads nothing.
type heldBody struct {
	mu   sync.Mutex
	r    *bytes.Reader // nil once closed
	hold Hold
	// pieced gives the body's bytes as pieces of the call's bodies, from
	// the client's (conv.Request.AppendPieces; nil: none), written in one
	// writev from a list made as it is written.
	pieced piecer
	from   []byte
}

// piecer is a view, or an edited body whose view is to be made, that
// appends its body as pieces of from (conv.Request.AppendPieces,
// conv.Applied.AppendPieces).
type piecer interface {
	AppendPieces(dst [][]byte, from []byte) ([][]byte, bool)
}

func newHeldBody(call *Call, body []byte) *heldBody {
	return &heldBody{r: bytes.NewReader(body), hold: call.Hold()}
}

// newPiecedBody is newHeldBody with the body's pieces: when the view the
// transforms left, or left to make (SetViewLater), is of body (one Apply
// made from the client's body, which the call holds), the upload reads the
// stretches the edits left alone from the body just read from the client
// instead of from the edited copy (conv.Request.AppendPieces). Of body
// means its very bytes: a later transform that returned the start of the
// same buffer (a body cut short) leaves a view of more bytes than body.
func newPiecedBody(call *Call, body []byte) *heldBody {
	h := newHeldBody(call, body)
	switch a, v := call.later, call.View; {
	case a != nil && sameBytes(a.Body, body):
		h.pieced, h.from = a, call.ClientBody
	case v != nil && sameBytes(v.Body, body):
		h.pieced, h.from = v, call.ClientBody
	}
	return h
}

func (h *heldBody) Read(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.r == nil {
		return 0, errBodyClosed
	}
	return h.r.Read(p)
}

// Close releases the hold (once, whoever closes it first).
func (h *heldBody) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.r != nil {
		h.r = nil
		h.hold.Release()
	}
	return nil
}

// inMemory reports whether what is left of the body is written by
// writeTo, no longer than limit and not closed: a write of it cut short
// leaves the body where it stopped, to go on from there.
func (h *heldBody) inMemory(limit int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fits(limit)
}

// fits is inMemory with the lock held.
func (h *heldBody) fits(limit int64) bool { return h.r != nil && int64(h.r.Len()) <= limit }

// writeTo writes what is left of the body to w in one Write, the lock
// held (countingConn.ReadFrom: the h1Transport's request write, which
// closes the body only after it).
func (h *heldBody) writeTo(w io.Writer, limit int64) (n int64, ok bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.fits(limit) {
		return 0, false, nil
	}
	if pw, ok := w.(piecesWriter); ok && h.pieced != nil && pw.writesPieces() {
		lp := pieceLists.Get().(*net.Buffers)
		defer func() {
			clear(*lp) // no body kept alive by the pool
			*lp = (*lp)[:0]
			pieceLists.Put(lp)
		}()
		if *lp, ok = h.pieced.AppendPieces((*lp)[:0], h.from); ok {
			// What is left of them: a buffered writer took the first
			// bytes after the request's head.
			at := h.r.Size() - int64(h.r.Len())
			n, err = pw.writePieces(*lp, at)
			piecedBodies.Add(1)
			if _, serr := h.r.Seek(at+n, io.SeekStart); err == nil {
				err = serr
			}
			return n, true, err
		}
	}
	n, err = h.r.WriteTo(w)
	return n, true, err
}

// piecedBodies counts the bodies written from their pieces (tests).
var piecedBodies atomic.Int64

// piecesWriter writes a body's pieces one after the other, as one write
// of their bytes (countingConn: one writev), when writesPieces says so.
type piecesWriter interface {
	writesPieces() bool
	writePieces(pieces net.Buffers, from int64) (int64, error)
}

// errBodyClosed is a Read of a heldBody after its Close.
var errBodyClosed = errors.New("proxy: request body read after close")
