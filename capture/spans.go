package capture

import (
	"slices"

	"github.com/shaperproxy/shaperproxy/conv"
)

// spansOf returns splitBody(view.Body) from the view the proxy made of
// the body (its messages' and top-level values' byte ranges), without
// reading the body again; nil when the view cannot tell (a repeated key,
// an "input" array, which splitBody also splits), and splitBody must.
// The spans are appended to dst[:0] (the writer's scratch).
func spansOf(view *conv.Request, dst []span) []span {
	if view == nil || view.DuplicateKeys {
		return nil
	}
	fields := view.Fields()
	spans := slices.Grow(dst[:0], len(view.Messages)+len(fields))
	for _, f := range fields {
		switch {
		case f.Key == "input":
			return nil
		case f.Key == "messages":
			for i := range view.Messages {
				m := &view.Messages[i]
				// Keyed when parsed, not hashed again; elements of a valid
				// array one byte apart have a comma between them.
				comma := i > 0 && m.Start == view.Messages[i-1].End+1
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
