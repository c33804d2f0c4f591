// Package sse splits a Server-Sent Events stream into events without
// changing a byte of it.
//
// A Reader returns each event with its exact raw bytes (field lines, comment
// lines and the blank line that ends it), so a proxy can forward the event
// verbatim and still look at its data. A single 1 MB data line is read
// whole (a bufio.Scanner with its default 64 KiB limit silently ends such
// streams).
//
// What a Reader keeps of one event is bounded (DefaultMaxEvent unless
// Options.MaxEvent says otherwise): an event longer than that is returned
// with Truncated set, its first MaxEvent bytes in Raw and its size in Size,
// and the rest is never held. With Options.Spill set, every byte of such an
// event is handed to Spill as it is read, so a proxy can still pass the
// whole event on without holding it; no line is ever held whole either.
//
// Events are separated by a blank line. Lines end in "\n" or "\r\n"; a lone
// "\r" is not treated as a line end (no LLM provider sends one, and treating
// it as data keeps every byte in place). A stream that ends without a final
// blank line yields the partial event (Partial is true) before the error, so
// a truncation can be forwarded as the same truncation.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// DefaultMaxEvent is the most bytes of one event a Reader keeps (in Raw,
// and again in Data) unless Options.MaxEvent says otherwise.
const DefaultMaxEvent = 4 << 20

// Event is one SSE event as it appeared on the wire.
type Event struct {
	// Raw holds the event's exact bytes, including the blank line that
	// terminated it and any stray blank lines before it (only the first
	// MaxEvent bytes when Truncated). It is only valid until the next call
	// to Next.
	Raw []byte
	// Name is the value of the last "event:" field, or nil.
	Name []byte
	// Data is the concatenation of the "data:" fields joined by "\n" (only
	// its first MaxEvent bytes when Truncated). It is only valid until the
	// next call to Next.
	Data []byte
	// HasData reports whether at least one "data:" field was present.
	HasData bool
	// Comment reports whether the event holds only comment lines
	// (": keep-alive", ": OPENROUTER PROCESSING").
	Comment bool
	// Partial is true when the stream ended before the blank line that
	// closes the event.
	Partial bool
	// Truncated is true when the event was longer than the Reader's
	// MaxEvent: Raw, Data and Name then hold only their beginning. With
	// Options.Spill set, the whole event went to Spill.
	Truncated bool
	// Size is the number of bytes of the whole event on the wire.
	Size int64
}

// IsDone reports whether the event is the OpenAI end-of-stream marker
// "data: [DONE]".
func (e *Event) IsDone() bool {
	return e.HasData && !e.Truncated && bytes.Equal(bytes.TrimSpace(e.Data), []byte("[DONE]"))
}

// Options configure a Reader.
type Options struct {
	// MaxEvent bounds the bytes of one event the Reader keeps in Raw and
	// in Data (zero or less: DefaultMaxEvent).
	MaxEvent int
	// Spill, when set, receives in order every byte of an event longer
	// than MaxEvent, from the moment it outgrows MaxEvent (the bytes read
	// so far first): the caller forwards them and must not forward the
	// returned event's Raw again. An error from Spill ends the stream:
	// Next returns it.
	Spill func(p []byte) error
	// BufferSize is the read buffer's size (default 32 KiB, at least 16).
	BufferSize int
}

// Reader reads events from an SSE stream. Use NewReader; a Reader is not
// safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	max     int
	spill   func([]byte) error
	pending error
	partial bool // the last event returned was cut short

	// The current event.
	raw       []byte // its first max bytes
	size      int64  // all its bytes
	data      []byte
	name      []byte
	ndata     int  // data fields seen
	hasData   bool // a data field was seen
	started   bool // a line with content was seen: a blank line ends the event
	nonBlank  bool // a byte other than CR and LF was seen
	truncated bool // raw, data or name outgrew max
	spilling  bool // the event's bytes go to spill

	// The current line.
	inLine    bool // a line was begun and has not ended
	kind      lineKind
	skipSpace bool // the line's ":" ended the last chunk: a space may follow
	pendingCR bool // the last chunk of the line ended in "\r", held back
}

// lineKind says what a line's value is added to.
type lineKind uint8

const (
	lineOther lineKind = iota // a comment or a field the Reader does not keep
	lineData
	lineEvent
)

// shrinkAbove: buffers grown past this by a large event are let go at the
// next event, so one large event does not pin its memory for a whole stream.
const shrinkAbove = 256 << 10

// Truncated reports whether the stream ended inside an event (the last
// event returned had Partial set). It says nothing about Event.Truncated.
func (r *Reader) Truncated() bool { return r.partial }

// NewReader returns a Reader that reads from r, keeping at most
// DefaultMaxEvent bytes of an event.
func NewReader(r io.Reader) *Reader { return NewReaderOptions(r, Options{}) }

// NewReaderOptions returns a Reader that reads from r as o says.
func NewReaderOptions(r io.Reader, o Options) *Reader {
	if o.MaxEvent <= 0 {
		o.MaxEvent = DefaultMaxEvent
	}
	if o.BufferSize <= 0 {
		o.BufferSize = 32 << 10
	}
	return &Reader{br: bufio.NewReaderSize(r, o.BufferSize), max: o.MaxEvent, spill: o.Spill}
}

// Next returns the next event. At the clean end of the stream it returns
// io.EOF. When the stream ends inside an event (io.EOF or another read
// error), Next first returns that event with Partial set and a nil error,
// and the error on the following call.
func (r *Reader) Next() (Event, error) {
	if r.pending != nil {
		return Event{}, r.pending
	}
	r.reset()
	for {
		chunk, err := r.br.ReadSlice('\n')
		full := errors.Is(err, bufio.ErrBufferFull)
		if !r.inLine && err == nil && isBlankLine(chunk) {
			if serr := r.keep(chunk); serr != nil {
				return r.fail(serr)
			}
			if r.started {
				return r.event(false), nil
			}
			continue // stray blank line: kept in Raw of the next event
		}
		if len(chunk) > 0 {
			if serr := r.keep(chunk); serr != nil {
				return r.fail(serr)
			}
			r.line(chunk, !full)
		}
		if full {
			continue
		}
		if err != nil {
			r.pending = err
			if r.size > 0 {
				return r.event(true), nil
			}
			return Event{}, err
		}
	}
}

// fail ends the stream with a Spill error.
func (r *Reader) fail(err error) (Event, error) {
	r.pending = fmt.Errorf("sse: spill: %w", err)
	return Event{}, r.pending
}

func (r *Reader) reset() {
	if cap(r.raw) > shrinkAbove {
		r.raw = nil
	}
	if cap(r.data) > shrinkAbove {
		r.data = nil
	}
	if cap(r.name) > shrinkAbove {
		r.name = nil
	}
	r.raw, r.data, r.name = r.raw[:0], r.data[:0], r.name[:0]
	r.size, r.ndata = 0, 0
	r.hasData, r.started, r.nonBlank, r.truncated, r.spilling = false, false, false, false, false
	r.inLine, r.skipSpace, r.pendingCR = false, false, false
}

func (r *Reader) event(partial bool) Event {
	r.partial = partial
	ev := Event{Raw: r.raw, HasData: r.hasData, Partial: partial, Truncated: r.truncated, Size: r.size}
	if r.hasData {
		ev.Data = r.data
	}
	if len(r.name) > 0 {
		ev.Name = r.name
	}
	ev.Comment = !r.hasData && ev.Name == nil && r.nonBlank
	return ev
}

// keep adds chunk to the event's raw bytes, up to max; past max the
// event is truncated and, with a spill, its bytes go there.
func (r *Reader) keep(chunk []byte) error {
	r.size += int64(len(chunk))
	if !r.nonBlank {
		r.nonBlank = len(bytes.Trim(chunk, "\r\n")) > 0
	}
	if len(r.raw)+len(chunk) <= r.max && !r.spilling {
		r.raw = appendCapped(r.raw, chunk, r.max)
		return nil
	}
	r.truncated = true
	if r.spill == nil {
		r.raw = appendCapped(r.raw, chunk, r.max)
		return nil
	}
	if !r.spilling {
		r.spilling = true
		if err := r.spill(r.raw); err != nil {
			return err
		}
	}
	r.raw = appendCapped(r.raw, chunk, r.max)
	return r.spill(chunk)
}

// line interprets one chunk of a line that is not a blank line; last
// reports whether the line ends with it (at "\n" or at the end of the
// stream).
func (r *Reader) line(chunk []byte, last bool) {
	body := bytes.TrimSuffix(chunk, []byte("\n"))
	if !r.inLine {
		body = r.begin(body, last)
	} else if r.skipSpace && len(body) > 0 {
		body = bytes.TrimPrefix(body, []byte(" "))
		r.skipSpace = false
	}
	r.inLine = !last
	cr := r.pendingCR
	r.pendingCR = false
	if last {
		if len(body) == 0 {
			cr = false // the held "\r" ended the line
		}
		body = bytes.TrimSuffix(body, []byte("\r"))
	} else if n := len(body); n > 0 && body[n-1] == '\r' {
		body, r.pendingCR = body[:n-1], true
	}
	if cr {
		r.value([]byte("\r"))
	}
	r.value(body)
}

// begin reads the field name at the start of a line and returns what
// follows it: the start of the value.
func (r *Reader) begin(body []byte, last bool) []byte {
	r.kind, r.skipSpace = lineOther, false
	content := body
	if last {
		content = bytes.TrimSuffix(body, []byte("\r"))
	}
	if len(content) == 0 {
		return nil // a lone "\r" at the end of the stream
	}
	r.started = true
	if content[0] == ':' {
		return nil
	}
	name, value := content, body[len(body):]
	if i := bytes.IndexByte(body, ':'); i >= 0 {
		name, value = body[:i], body[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		} else if len(value) == 0 && !last {
			r.skipSpace = true
		}
	} else if !last {
		return nil // a name longer than a whole chunk: no field we keep
	}
	switch string(name) {
	case "data":
		r.kind, r.hasData = lineData, true
		if r.ndata > 0 {
			r.data = r.appendKept(r.data, []byte("\n"))
		}
		r.ndata++
	case "event":
		r.kind = lineEvent
		r.name = r.name[:0]
	}
	return value
}

// value adds a piece of the current line's value to what it belongs to.
func (r *Reader) value(v []byte) {
	switch r.kind {
	case lineData:
		r.data = r.appendKept(r.data, v)
	case lineEvent:
		r.name = r.appendKept(r.name, v)
	}
}

// appendKept appends src to dst up to max and marks the event truncated
// when something was left out.
func (r *Reader) appendKept(dst, src []byte) []byte {
	if len(dst)+len(src) > r.max {
		r.truncated = true
	}
	return appendCapped(dst, src, r.max)
}

// appendCapped appends as much of src to dst as keeps it within limit
// bytes, never growing its capacity past limit.
func appendCapped(dst, src []byte, limit int) []byte {
	n := min(len(src), limit-len(dst))
	if n <= 0 {
		return dst
	}
	if cap(dst)-len(dst) < n {
		grown := make([]byte, len(dst), min(max(2*cap(dst), len(dst)+n), limit))
		copy(grown, dst)
		dst = grown
	}
	return append(dst, src[:n]...)
}

// isBlankLine reports whether a whole line is empty ("\n" or "\r\n").
func isBlankLine(line []byte) bool {
	return len(line) == 1 || len(line) == 2 && line[0] == '\r'
}
