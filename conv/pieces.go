package conv

import "unsafe"

// minPieces is the least body Apply describes as pieces (Pieces): a
// smaller one is written as it is.
const minPieces = 64 << 10

// Pieces returns the body of a view Apply made as pieces whose bytes,
// one after the other, are Body's: the stretches the edits left alone
// as slices of from, the body the view was edited from, and each edit's
// replacement as a slice of Body. It returns nil when from is not that
// body (the same slice), the view is not one Apply made, or the body is
// shorter than minPieces. The list is the view's: read it, never change
// it (net.Buffers consumes the list it writes: write a copy).
//
// A proxy that still holds from writes the pieces (one writev) instead
// of Body: from is the body it has just read, still in the processor's
// cache, where most of Body, written over a body kept from an earlier
// request (editedBodies), has not been touched since then, and a copy
// from it costs the kernel more (internal/bench/HISTORY.md, Session BE).
func (r *Request) Pieces(from []byte) [][]byte {
	if r.pieces == nil || !sameSlice(from, r.from) {
		return nil
	}
	return r.pieces
}

// sameSlice reports whether a and b are the same non-empty slice (the same
// first byte and length).
func sameSlice(a, b []byte) bool {
	return len(a) == len(b) && len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b)
}

// piecesOf returns body, the sorted edits applied to from, as Pieces
// describes it; nil for a body shorter than minPieces or without edits.
func piecesOf(from, body []byte, edits []Edit) [][]byte {
	if len(body) < minPieces || len(edits) == 0 {
		return nil
	}
	ps := make([][]byte, 0, 2*len(edits)+1)
	at, shift := 0, 0 // at: from's next byte; shift: body's offset from from's there
	for _, e := range edits {
		if at < e.Start {
			ps = append(ps, from[at:e.Start:e.Start])
		}
		if n := len(e.Repl); n > 0 {
			s := e.Start + shift
			ps = append(ps, body[s:s+n:s+n])
		}
		shift += len(e.Repl) - (e.End - e.Start)
		at = e.End
	}
	if at < len(from) {
		ps = append(ps, from[at:len(from):len(from)])
	}
	return ps
}
