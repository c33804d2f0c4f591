package capture

import (
	"fmt"
	"strconv"
	"strings"
)

// Pos is the position of a record: its segment, the byte offset in the
// segment file of the frame that holds it, and its index in that frame.
// The zero Pos is the start of the log.
type Pos struct {
	Segment uint64
	Offset  int64
	Index   int
}

// String formats p as "SEG:OFF", or "SEG:OFF+IDX" for a record after the
// first of its frame.
func (p Pos) String() string {
	if p.Index == 0 {
		return fmt.Sprintf("%d:%d", p.Segment, p.Offset)
	}
	return fmt.Sprintf("%d:%d+%d", p.Segment, p.Offset, p.Index)
}

// ParsePos parses "SEG", "SEG:OFF" or "SEG:OFF+IDX". An offset need not be
// a frame start: reading from it starts at the first frame at or after it.
func ParsePos(s string) (Pos, error) {
	var p Pos
	seg, rest, hasOff := strings.Cut(s, ":")
	var err error
	if p.Segment, err = strconv.ParseUint(seg, 10, 64); err != nil {
		return Pos{}, fmt.Errorf("position %q: bad segment", s)
	}
	if !hasOff {
		return p, nil
	}
	off, idx, hasIdx := strings.Cut(rest, "+")
	if p.Offset, err = strconv.ParseInt(off, 10, 64); err != nil || p.Offset < 0 {
		return Pos{}, fmt.Errorf("position %q: bad offset", s)
	}
	if hasIdx {
		if p.Index, err = strconv.Atoi(idx); err != nil || p.Index < 0 {
			return Pos{}, fmt.Errorf("position %q: bad index", s)
		}
	}
	return p, nil
}
