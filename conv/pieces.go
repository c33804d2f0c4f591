package conv

import (
	"slices"
	"unsafe"
)

// minPieces is the least body Apply describes as pieces (AppendPieces): a
// smaller one is written as it is.
const minPieces = 64 << 10

// AppendPieces appends to dst the body of a view Apply made as pieces
// whose bytes, one after the other, are Body's: the stretches the edits
// left alone as slices of from, the body the view was edited from, and
// each edit's replacement as a slice of Body. ok is false, with dst as it
// was, when from is not that body (the same slice), the view is not one
// Apply made, or the body is shorter than minPieces.
//
// A proxy that still holds from writes the pieces (one writev) instead
// of Body: from is the body it has just read, still in the processor's
// cache, where most of Body, written over a body kept from an earlier
// request (editedBodies), has not been touched since then, and a copy
// from it costs the kernel more (internal/bench/HISTORY.md, Session BE).
// The list is the caller's (its writer's, pooled: net.Buffers consumes
// the list it writes), made as it writes: a view keeps only its edits'
// places (cuts), no list of its own.
func (r *Request) AppendPieces(dst [][]byte, from []byte) (_ [][]byte, ok bool) {
	if r.cuts == nil || !sameSlice(from, r.from) {
		return dst, false
	}
	return appendPieces(dst, from, r.Body, r.cuts), true
}

// sameSlice reports whether a and b are the same non-empty slice (the same
// first byte and length).
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// pieced reports whether body, the sorted edits applied to a body, is
// described as pieces (AppendPieces): it is large enough and edited.
func pieced(body []byte, edits []Edit) bool {
	return len(body) >= minPieces && len(edits) > 0
}

// appendPieces appends body, the sorted edits applied to from, to dst as
// AppendPieces describes it. Only the edits' places and their
// replacements' lengths are read (a replacement's bytes are body's).
func appendPieces(dst [][]byte, from, body []byte, edits []Edit) [][]byte {
	dst = slices.Grow(dst, 2*len(edits)+1) // room at once: a pooled list grows to the largest body's
	at, shift := 0, 0                      // at: from's next byte; shift: body's offset from from's there
	for _, e := range edits {
		if at < e.Start {
			dst = append(dst, from[at:e.Start:e.Start])
		}
		if n := len(e.Repl); n > 0 {
			s := e.Start + shift
			dst = append(dst, body[s:s+n:s+n])
		}
		shift += len(e.Repl) - (e.End - e.Start)
		at = e.End
	}
	if at < len(from) {
		dst = append(dst, from[at:len(from):len(from)])
	}
	return dst
}
