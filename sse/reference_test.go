package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// refReader is the Reader as it was before events were bounded: it holds
// each whole event, whatever its size. It is the specification the fuzz
// target checks the bounded Reader against.
type refReader struct {
	br      *bufio.Reader
	raw     []byte
	data    []byte
	name    []byte
	ndata   int
	pending error
}

func newRefReader(r io.Reader) *refReader {
	return &refReader{br: bufio.NewReaderSize(r, 32<<10)}
}

func (r *refReader) Next() (Event, error) {
	if r.pending != nil {
		return Event{}, r.pending
	}
	r.raw, r.data, r.name, r.ndata = r.raw[:0], r.data[:0], r.name[:0], 0
	var hasData, hasField bool
	for {
		start := len(r.raw)
		err := r.readLine()
		line := r.raw[start:]
		content := refTrimEOL(line)
		if len(line) > 0 && len(content) == 0 && err == nil {
			if hasField || refHasNonBlank(r.raw[:start]) {
				return r.event(hasData, false), nil
			}
			continue
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

func (r *refReader) event(hasData, partial bool) Event {
	ev := Event{Raw: r.raw, HasData: hasData, Partial: partial, Size: int64(len(r.raw))}
	if hasData {
		ev.Data = r.data
	}
	if len(r.name) > 0 {
		ev.Name = r.name
	}
	ev.Comment = !hasData && ev.Name == nil && refHasNonBlank(r.raw)
	return ev
}

func (r *refReader) readLine() error {
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.raw = append(r.raw, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return err
	}
}

func (r *refReader) field(line []byte) (isData, isField bool) {
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

func refTrimEOL(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

func refHasNonBlank(b []byte) bool {
	return len(bytes.Trim(b, "\r\n")) > 0
}
