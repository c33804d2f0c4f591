package proxy

import (
	"bytes"
	"slices"
	"sync/atomic"

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
	refs atomic.Int32 // the call's own, and one per Hold not yet released
	bufs [][]byte     // appended by the handler's goroutine only, before its release
}

// own makes b one of the call's bodies, given back with them: the call
// takes over the reference of whoever made it (the proxy's body read, a
// transform's output). A body that is not a bigbuf buffer, or is already
// the call's, is left alone.
func (c *Call) own(b []byte) {
	if cap(b) < bigbuf.MinSize {
		return
	}
	if c.bodies == nil {
		c.bodies = new(bodies)
		c.bodies.refs.Store(1)
	}
	if slices.ContainsFunc(c.bodies.bufs, func(x []byte) bool { return sameBuffer(x, b) }) {
		return
	}
	c.bodies.bufs = append(c.bodies.bufs, b)
}

// sameBuffer reports whether a and b start at the same byte.
func sameBuffer(a, b []byte) bool {
	return cap(a) > 0 && cap(b) > 0 && &a[:1][0] == &b[:1][0]
}

// Hold keeps the call's request bodies — ClientBody, the bodies the
// transforms made, and so the strings of every view of them — from being
// reused when the call ends, until release is called (exactly once). An
// observer or hook that reads them after the call (the capture writer, a
// branch that runs beside the call) takes a Hold while the call runs;
// everything else must not keep a byte or a string of them past the call's
// end without copying it. Hold after the call ended panics.
func (c *Call) Hold() (release func()) {
	b := c.bodies
	if b == nil {
		return noHold
	}
	if b.refs.Add(1) <= 1 {
		panic("proxy: Call.Hold after the call ended")
	}
	return b.release
}

// noHold is Hold's release when the call has no body to give back.
func noHold() {}

// releaseBodies drops the call's own reference to its bodies, when it
// ends (forward's last step).
func (c *Call) releaseBodies() {
	if c.bodies != nil {
		c.bodies.release()
	}
}

// release drops one reference; the last gives every body back.
func (b *bodies) release() {
	switch n := b.refs.Add(-1); {
	case n > 0:
		return
	case n < 0:
		panic("proxy: a call's bodies released more often than held")
	}
	for i, buf := range b.bufs {
		bigbuf.Release(buf)
		b.bufs[i] = nil
	}
}

// heldBody is an upstream request's body read from one of the call's
// bodies: it holds them until the transport closes it, which may be after
// RoundTrip returned (http.Transport writes from a goroutine of its own,
// and so does the h1Transport for a large body).
type heldBody struct {
	*bytes.Reader
	release atomic.Pointer[func()]
}

func newHeldBody(call *Call, body []byte) *heldBody {
	h := &heldBody{Reader: bytes.NewReader(body)}
	release := call.Hold()
	h.release.Store(&release)
	return h
}

// Close releases the hold (once, whoever closes it first).
func (h *heldBody) Close() error {
	if f := h.release.Swap(nil); f != nil {
		(*f)()
	}
	return nil
}
