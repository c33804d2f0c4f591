package capture

import (
	"slices"
	"sort"

	"github.com/shaperproxy/shaperproxy/conv"
)

// spansOf returns splitBody(view.Body) from the view the proxy made of
// the body (its messages' and top-level values' byte ranges), without
// reading the body again; nil when the view cannot tell (a repeated key,
// an "input" array, which splitBody also splits), and splitBody must.
//
// The spans are appended to dst, which holds those ending at or before
// from (a carry's: spanCarry), or none with from 0: only the spans after
// from are read from the view.
func spansOf(view *conv.Request, dst []span, from int) []span {
	if view == nil || view.DuplicateKeys {
		return nil
	}
	fields := view.Fields()
	spans := slices.Grow(dst, max(len(view.Messages)+len(fields)-len(dst), 0)) // room for all: dst's are some of them
	for _, f := range fields {
		switch {
		case f.Key == "input":
			return nil
		case f.End <= from: // dst's
		case f.Key == "messages":
			ms := view.Messages
			i := 0
			if from > 0 { // the first after dst's, found without reading each before it
				i = sort.Search(len(ms), func(i int) bool { return ms[i].End > from })
			}
			for ; i < len(ms); i++ {
				m := &ms[i]
				// Keyed when parsed, not hashed again; elements of a valid
				// array one byte apart have a comma between them.
				comma := i > 0 && m.Start == ms[i-1].End+1
				spans = append(spans, span{m.Start, m.End, m.RawKey(), comma})
			}
		case f.End-f.Start >= minWholeValue:
			spans = append(spans, span{start: f.Start, end: f.End, key: f.RawKey()}) // keyed when read, or carried from the previous request
		}
	}
	if !spansValid(view.Body, spans) {
		return nil
	}
	return spans
}

// sameBytes reports whether a and b are the same slice of memory.
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// spanCarry is what the writer found in a request's body: its spans and
// the blobs they are (ords), kept under the body's number
// (conv.Request.Lineage). A later body that repeats its first bytes
// takes the spans that lie within them, and their blobs, instead of
// reading those messages again: a long history's next request repeats
// hundreds.
type spanCarry struct {
	body  uint64
	spans []span
	ords  []uint32
}

// spanCarries are the carries of the latest requests' bodies, a
// segment's (its blobs' ordinals). A body is written over one whose call
// ended, and a call ends once the writer encoded its records, which come
// in batches: the body a request repeats is one of the last few dozen.
type spanCarries struct {
	c    [maxCarries]spanCarry
	next int // the oldest, replaced next
	held int // the spans the carries hold (their arrays' room)
}

// maxCarries bounds the bodies carried, and maxCarriedSpans the spans
// held for them (about 3 MB); a body past maxScratchSpans is not kept.
const (
	maxCarries      = 64
	maxCarriedSpans = 1 << 16
)

// find returns the carry of body (nil: none kept).
func (s *spanCarries) find(body uint64) *spanCarry {
	for i := range s.c {
		if c := &s.c[i]; c.body == body && body != 0 {
			return c
		}
	}
	return nil
}

// keep makes spans and ords body's carry in place of the oldest, and
// returns that one's spans array (emptied) for the writer's scratch.
// Past maxCarriedSpans the oldest others are let go.
func (s *spanCarries) keep(body uint64, spans []span, ords []uint32) (scratch []span) {
	c := &s.c[s.next]
	s.next = (s.next + 1) % maxCarries
	s.held += cap(spans) - cap(c.spans)
	scratch = c.spans[:0]
	c.body, c.spans, c.ords = body, spans, append(c.ords[:0], ords...)
	for i := s.next; s.held > maxCarriedSpans && i != s.next+maxCarries-1; i++ {
		if o := &s.c[i%maxCarries]; o != c && o.spans != nil {
			s.held -= cap(o.spans)
			*o = spanCarry{}
		}
	}
	return scratch
}
