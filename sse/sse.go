// Package sse splits a Server-Sent Events stream into events without
// changing a byte of it.
//
// A Reader returns each event with its exact raw bytes (field lines, comment
// lines and the blank line that ends it), so a proxy can forward the event
// verbatim and still look at its data. Lines have no length limit: a single
// 1 MB data line is read whole (a bufio.Scanner with its default 64 KiB limit
// silently ends such streams).
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
	"io"
)

// Event is one SSE event as it appeared on the wire.
type Event struct {
	// Raw holds the event's exact bytes, including the blank line that
	// terminated it and any stray blank lines before it. It is only valid
	// until the next call to Next.
	Raw []byte
	// Name is the value of the last "event:" field, or nil.
	Name []byte
	// Data is the concatenation of the "data:" fields joined by "\n".
	// It is only valid until the next call to Next.
	Data []byte
	// HasData reports whether at least one "data:" field was present.
	HasData bool
	// Comment reports whether the event holds only comment lines
	// (": keep-alive", ": OPENROUTER PROCESSING").
	Comment bool
	// Partial is true when the stream ended before the blank line that
	// closes the event.
	Partial bool
}

// IsDone reports whether the event is the OpenAI end-of-stream marker
// "data: [DONE]".
func (e *Event) IsDone() bool {
	return e.HasData && bytes.Equal(bytes.TrimSpace(e.Data), []byte("[DONE]"))
}

// Reader reads events from an SSE stream. Use NewReader; a Reader is not
// safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	raw     []byte
	data    []byte
	name    []byte
	ndata   int // data fields seen in the current event
	pending error
	partial bool // the last event returned was cut short
}

// Truncated reports whether the stream ended inside an event (the last
// event returned had Partial set).
func (r *Reader) Truncated() bool { return r.partial }

// NewReader returns a Reader that reads from r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 32<<10)}
}

// Next returns the next event. At the clean end of the stream it returns
// io.EOF. When the stream ends inside an event (io.EOF or another read
// error), Next first returns that event with Partial set and a nil error,
// and the error on the following call.
func (r *Reader) Next() (Event, error) {
	if r.pending != nil {
		return Event{}, r.pending
	}
	r.raw, r.data, r.name, r.ndata = r.raw[:0], r.data[:0], r.name[:0], 0
	var hasData, hasField bool
	for {
		start := len(r.raw)
		err := r.readLine()
		line := r.raw[start:]
		content := trimEOL(line)
		if len(line) > 0 && len(content) == 0 && err == nil {
			if hasField || hasNonBlank(r.raw[:start]) {
				return r.event(hasData, false), nil
			}
			continue // stray blank line: kept in Raw of the next event
		}
		if len(content) > 0 {
			d, f := r.field(content)
			hasData = hasData || d
			hasField = hasField || f
		}
		if err != nil {
			r.pending = err
			if len(r.raw) > 0 {
				return r.event(hasData, true), nil
			}
			return Event{}, err
		}
	}
}

func (r *Reader) event(hasData, partial bool) Event {
	r.partial = partial
	ev := Event{Raw: r.raw, HasData: hasData, Partial: partial}
	if hasData {
		ev.Data = r.data
	}
	if len(r.name) > 0 {
		ev.Name = r.name
	}
	ev.Comment = !hasData && ev.Name == nil && hasNonBlank(r.raw)
	return ev
}

// readLine appends one line, with its end-of-line bytes, to r.raw.
func (r *Reader) readLine() error {
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.raw = append(r.raw, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return err
	}
}

// field interprets one non-blank line. It reports whether the line was a
// data field and whether it was any field other than a comment.
func (r *Reader) field(line []byte) (isData, isField bool) {
	if line[0] == ':' {
		return false, false
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) {
	case "data":
		if r.ndata > 0 {
			r.data = append(r.data, '\n')
		}
		r.data = append(r.data, value...)
		r.ndata++
		return true, true
	case "event":
		r.name = append(r.name[:0], value...)
	}
	return false, true
}

func trimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

func hasNonBlank(b []byte) bool {
	return len(bytes.Trim(b, "\r\n")) > 0
}
