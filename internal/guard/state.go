package guard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// stateVersion is the first byte of a marshalled State. Version 2 added
// AckSeq; a version 1 state is still read (its AckSeq is -1, unknown).
const (
	stateVersion   = 2
	stateVersionV1 = 1
)

// Limits of UnmarshalBinary, far above anything Decide writes.
const (
	maxIDLen   = 1 << 16
	maxTextLen = 4096
)

// errBadState is wrapped by UnmarshalBinary for data it cannot read.
var errBadState = errors.New("guard: bad state encoding")

// equal reports whether s and t are the same state.
func (s state) equal(t state) bool {
	return s.AckCallID == t.AckCallID && s.AckSeq == t.AckSeq && s.StallReported == t.StallReported &&
		s.StallPending == t.StallPending && s.Pending == t.Pending && s.StepDownLeft == t.StepDownLeft &&
		slices.Equal(s.Notices, t.Notices)
}

// MarshalBinary encodes s in a small versioned binary form. It fails
// only for a State that Decide does not make: more than MaxNotices
// notices, or an id or text beyond the limits UnmarshalBinary accepts.
func (s state) MarshalBinary() ([]byte, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	b := []byte{stateVersion}
	b = appendLenString(b, s.AckCallID)
	b = binary.AppendUvarint(b, uint64(max(s.AckSeq, -1)+1))
	var flags byte
	if s.StallReported {
		flags |= 1
	}
	if s.StallPending {
		flags |= 2
	}
	b = append(b, flags)
	for _, v := range []int{s.Pending.StepChars, s.Pending.TurnChars, s.Pending.Steps, s.StepDownLeft, len(s.Notices)} {
		b = binary.AppendUvarint(b, uint64(max(v, 0)))
	}
	for _, n := range s.Notices {
		b = append(b, byte(n.Kind))
		b = binary.AppendUvarint(b, uint64(max(n.Message, 0)))
		b = binary.LittleEndian.AppendUint64(b, n.Hash)
		b = appendLenString(b, n.Text)
	}
	return b, nil
}

func (s state) check() error {
	if len(s.Notices) > maxNotices || len(s.AckCallID) > maxIDLen {
		return fmt.Errorf("%w: too many notices or id too long", errBadState)
	}
	for _, n := range s.Notices {
		if len(n.Text) > maxTextLen {
			return fmt.Errorf("%w: notice text too long", errBadState)
		}
	}
	return nil
}

func appendLenString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// UnmarshalBinary decodes what MarshalBinary wrote. On error s is left
// unchanged and the error wraps ErrBadState; the wiring should then start
// from the zero State.
func (s *state) UnmarshalBinary(data []byte) error {
	r := reader{b: data}
	version := r.byte()
	if version != stateVersion && version != stateVersionV1 {
		return fmt.Errorf("%w: unknown version", errBadState)
	}
	var t state
	t.AckCallID = r.string(maxIDLen)
	t.AckSeq = -1
	if version == stateVersion {
		t.AckSeq = r.int() - 1
	}
	flags := r.byte()
	t.StallReported, t.StallPending = flags&1 != 0, flags&2 != 0
	t.Pending.StepChars = r.int()
	t.Pending.TurnChars = r.int()
	t.Pending.Steps = r.int()
	t.StepDownLeft = r.int()
	count := r.int()
	if count > maxNotices {
		r.fail()
	}
	for i := 0; i < count && r.err == nil; i++ {
		var n notice
		n.Kind = kind(r.byte())
		n.Message = r.int()
		n.Hash = r.uint64()
		n.Text = r.string(maxTextLen)
		t.Notices = append(t.Notices, n)
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail()
	}
	if r.err != nil {
		return r.err
	}
	*s = t
	return nil
}

// reader reads the encoding; the first problem sticks in err.
type reader struct {
	b   []byte
	err error
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = fmt.Errorf("%w: truncated or out of range", errBadState)
	}
	r.b = nil
}

func (r *reader) byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *reader) int() int {
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > 1<<31 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return int(v)
}

func (r *reader) uint64() uint64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.LittleEndian.Uint64(r.b)
	r.b = r.b[8:]
	return v
}

func (r *reader) string(limit int) string {
	n := r.int()
	if n > limit || n > len(r.b) {
		r.fail()
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}
