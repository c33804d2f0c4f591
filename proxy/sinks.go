package proxy

import (
	"bytes"
	"compress/flate"
	"io"
	"net/http"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/shaperproxy/shaperproxy/sse"
)

// sinkList fans one response out to every observer's sink.
type sinkList []ResponseSink

// observe asks every observer for a sink for this attempt.
func (p *Proxy) observe(call *Call, out *http.Request, body []byte) sinkList {
	if len(p.opts.Observers) == 0 {
		return nil
	}
	up := &Upstream{Method: out.Method, URL: out.URL.String(), Header: out.Header, Body: body}
	var sinks sinkList
	for _, o := range p.opts.Observers {
		if s := o.Request(call, up); s != nil {
			sinks = append(sinks, s)
		}
	}
	return sinks
}

func (s sinkList) Response(info *ResponseInfo) {
	for _, k := range s {
		k.Response(info)
	}
}

func (s sinkList) Event(ev *sse.Event, seq int, at time.Duration) {
	for _, k := range s {
		k.Event(ev, seq, at)
	}
}

func (s sinkList) Body(p []byte) {
	for _, k := range s {
		k.Body(p)
	}
}

func (s sinkList) End(end End) {
	for _, k := range s {
		k.End(end)
	}
}

// tee hands the bytes of a raw-copied body to the sinks: as they are, or
// through a decoder goroutine when the body is compressed, split into SSE
// events when it is a stream. The zero tee (no sinks) does nothing.
type tee struct {
	sinks    sinkList
	direct   bool
	pw       *io.PipeWriter
	done     chan int
	events   int
	maxEvent int // what the decoder keeps of one event
	metrics  *Metrics
	tok      tokenWatch // the first token of a decoded chat stream
}

func (p *Proxy) newTee(sinks sinkList, call *Call, info *ResponseInfo) *tee {
	t := &tee{sinks: sinks, maxEvent: p.opts.MaxEventBytes, metrics: p.metrics, tok: tokenWatch{done: !call.Chat || !info.Stream}}
	if len(sinks) == 0 {
		return t
	}
	if !info.Encoded && !info.Stream {
		t.direct = true
		return t
	}
	pr, pw := io.Pipe()
	t.pw, t.done = pw, make(chan int, 1)
	go t.decode(pr, call, info)
	return t
}

func (t *tee) Write(p []byte) {
	switch {
	case t.direct:
		t.sinks.Body(p)
	case t.pw != nil:
		_, _ = t.pw.Write(p)
	}
}

// Close ends the tee and returns the number of events decoded; the tee's
// tokenWatch may be read after it. It is safe to call more than once.
func (t *tee) Close() int {
	if t.pw != nil {
		_ = t.pw.Close()
		t.events = <-t.done
		t.pw = nil
	}
	return t.events
}

func (t *tee) decode(pr *io.PipeReader, call *Call, info *ResponseInfo) {
	n := 0
	defer func() {
		_, _ = io.Copy(io.Discard, pr) // never leave the writer blocked
		t.done <- n
	}()
	r, closeFn := newDecoder(contentEncoding(info.Header), pr)
	if r == nil {
		return
	}
	defer closeFn()
	if !info.Stream {
		buf := make([]byte, 32<<10)
		for {
			k, err := r.Read(buf)
			t.sinks.Body(buf[:k])
			if err != nil {
				return
			}
		}
	}
	// The decoded side copy keeps at most maxEvent bytes of an event,
	// whatever the compressed body expands to.
	rd := sse.NewReaderOptions(r, sse.Options{MaxEvent: t.maxEvent})
	var ev sse.Event // one for the stream, as in copyEvents
	for ; ; n++ {
		var err error
		ev, err = rd.Next()
		if len(ev.Raw) > 0 {
			if ev.Truncated {
				t.metrics.truncated.Inc()
				t.metrics.truncatedBytes.Add(float64(ev.Size - int64(len(ev.Raw))))
			}
			at := call.Since()
			t.tok.see(&ev, at)
			t.sinks.Event(&ev, n, at)
		}
		if err != nil {
			return
		}
	}
}

// newDecoder returns a reader of the decoded body, or nil when the
// encoding is not one the proxy can read (the body still passes through).
func newDecoder(encoding string, r io.Reader) (io.Reader, func()) {
	switch encoding {
	case "":
		return r, func() {}
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(r)
		if err != nil {
			return nil, nil
		}
		return zr, func() { _ = zr.Close() }
	case "deflate":
		fr := flate.NewReader(r)
		return fr, func() { _ = fr.Close() }
	case "zstd":
		zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil
		}
		return zr, zr.Close
	}
	return nil, nil
}

// decodeAll decodes a small compressed body; on failure it returns what
// it could decode.
func decodeAll(encoding string, b []byte) []byte {
	r, closeFn := newDecoder(encoding, bytes.NewReader(b))
	if r == nil {
		return nil
	}
	defer closeFn()
	out, _ := io.ReadAll(io.LimitReader(r, maxRetryInspect))
	return out
}
