package capture

import (
	"encoding/binary"
	"errors"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/tidwall/gjson"
)

// minWholeValue is the size from which a top-level request value other
// than the message array (tools, system) is stored as a blob.
const minWholeValue = 1024

// arrayKeys are the top-level keys whose array elements are stored as one
// blob each: chat completions "messages", Responses "input".
var arrayKeys = map[string]bool{"messages": true, "input": true}

// span is a [start, end) range of a request body.
type span struct {
	start, end int
	key        conv.RawKey // the bytes' key when known (a message's, from the proxy's view), else zero
	// comma says the byte before start is a comma, and the whole gap
	// from the previous span when that gap is one byte: known from the
	// view (two array elements one byte apart), so the skeleton need not
	// read it — a byte on its own in a megabyte no longer in any cache.
	comma bool
}

// splitBody finds the parts of a JSON request body stored as blobs: each
// element of the message array and any other large top-level value. The
// spans are ordered and do not overlap. It returns nil for a body that is
// not a JSON object or holds nothing to share.
func splitBody(body []byte) []span {
	i := 0
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n') {
		i++
	}
	if i == len(body) || body[i] != '{' {
		return nil
	}
	// The string aliases body; gjson only reads it, and no result outlives
	// this function.
	root := gjson.Parse(conv.AsString(body))
	var spans []span
	add := func(v gjson.Result) bool {
		if len(spans) == maxSpans {
			spans = nil // too many: stored whole
			return false
		}
		spans = append(spans, span{start: v.Index, end: v.Index + len(v.Raw)})
		return true
	}
	root.ForEach(func(k, v gjson.Result) bool {
		switch {
		case arrayKeys[k.Str] && v.IsArray():
			ok := true
			v.ForEach(func(_, e gjson.Result) bool { ok = add(e); return ok })
			return ok
		case len(v.Raw) >= minWholeValue:
			return add(v)
		}
		return true
	})
	if !spansValid(body, spans) {
		return nil
	}
	return spans
}

// maxSpans bounds the blobs of one body, as conv bounds the messages of a
// view (a request past its bounds has no view and comes here): a span and
// a blob entry take about 40 bytes whatever the element's size, so a body
// of tiny elements ("input":[0,0,…]) would take many times its bytes.
// A body of more is stored whole.
const maxSpans = 2 * conv.MaxMessages

// spansValid checks what the skeleton relies on: ordered, in bounds,
// non-empty, not overlapping.
func spansValid(body []byte, spans []span) bool {
	prev := 0
	for _, s := range spans {
		if s.start < prev || s.end <= s.start || s.end > len(body) {
			return false
		}
		prev = s.end
	}
	return len(spans) > 0
}

// appendSkeleton encodes a body as literal bytes and blob references:
//
//	uvarint body length, uvarint blob count,
//	per blob: uvarint literal length, literal, varint ordinal delta,
//	uvarint final literal length, final literal.
func appendSkeleton(b, body []byte, spans []span, ords []uint32) []byte {
	b = binary.AppendUvarint(b, uint64(len(body)))
	b = binary.AppendUvarint(b, uint64(len(spans)))
	prevEnd, prevOrd := 0, int64(-1)
	for i, s := range spans {
		b = binary.AppendUvarint(b, uint64(s.start-prevEnd))
		if s.comma && s.start-prevEnd == 1 {
			b = append(b, ',')
		} else {
			b = append(b, body[prevEnd:s.start]...)
		}
		b = binary.AppendVarint(b, int64(ords[i])-prevOrd)
		prevEnd, prevOrd = s.end, int64(ords[i])
	}
	b = binary.AppendUvarint(b, uint64(len(body)-prevEnd))
	return append(b, body[prevEnd:]...)
}

var errBadSkeleton = errors.New("capture: malformed request skeleton")

// skeletonLen returns the length of the body a skeleton rebuilds.
func skeletonLen(sk []byte) (int, error) {
	n, k := binary.Uvarint(sk)
	if k <= 0 || n > maxFrameLen {
		return 0, errBadSkeleton
	}
	return int(n), nil
}

// rebuild reassembles a body from its skeleton, asking blob for each
// referenced blob.
func rebuild(sk []byte, blob func(ord uint32) ([]byte, error)) ([]byte, error) {
	total, k := binary.Uvarint(sk)
	if k <= 0 || total > maxFrameLen {
		return nil, errBadSkeleton
	}
	sk = sk[k:]
	count, k := binary.Uvarint(sk)
	if k <= 0 || count > uint64(len(sk)) {
		return nil, errBadSkeleton
	}
	sk = sk[k:]
	out := make([]byte, 0, total)
	ord := int64(-1)
	for range count {
		lit, rest, err := readBytes(sk)
		if err != nil {
			return nil, errBadSkeleton
		}
		out = append(out, lit...)
		d, k := binary.Varint(rest)
		if k <= 0 {
			return nil, errBadSkeleton
		}
		sk, ord = rest[k:], ord+d
		if ord < 0 || ord > 1<<32-1 {
			return nil, errBadSkeleton
		}
		data, err := blob(uint32(ord))
		if err != nil {
			return nil, err
		}
		if len(out)+len(data) > int(total) {
			return nil, errBadSkeleton
		}
		out = append(out, data...)
	}
	lit, rest, err := readBytes(sk)
	if err != nil || len(rest) != 0 {
		return nil, errBadSkeleton
	}
	out = append(out, lit...)
	if len(out) != int(total) {
		return nil, errBadSkeleton
	}
	return out, nil
}
