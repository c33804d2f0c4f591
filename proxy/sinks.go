package proxy

import (
	"bytes"
	"compress/flate"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/sse"
)

// sinkList fans one response out to every observer's sink. A sink that
// panics (an observer's bug, or input it did not expect) is logged and
// left out for the rest of the attempt: the client's call goes on, and a
// sink called from the decoder goroutine cannot take the process down.
//
// The list also reads, once for all of them, the usage the response
// reports (conv.UsageWatcher), and hands it over with the end; the
// watcher is guarded as a sink is (a panic leaves it out, and the end
// carries no usage).
type sinkList struct {
	s     []ResponseSink
	log   *slog.Logger
	id    string // the call, for the log line
	usage *usageWatch
}

// usageWatch is the list's usage watcher, off once it panicked.
type usageWatch struct {
	w   conv.UsageWatcher
	off bool
}

// observe asks every observer for a sink for this attempt: a client's
// call's beside its trip (besideWork), an internal call's before it.
func (p *Proxy) observe(call *Call, out *http.Request, body []byte, at time.Duration) sinkList {
	if len(p.opts.Observers) == 0 {
		return sinkList{}
	}
	ob := &observed{up: Upstream{Method: out.Method, URL: p.lastURL.of(out.URL), Header: out.Header, Body: body, At: at}}
	up := &ob.up
	sinks := sinkList{log: p.log, id: call.ID, s: ob.sinks[:0], usage: &ob.usage}
	for _, o := range p.opts.Observers {
		if s := p.tell(o, call, up); s != nil {
			sinks.s = append(sinks.s, s)
		}
	}
	return sinks
}

// tell tells o of the request: an observer that panics is logged and sees
// nothing of the attempt (it is told beside the trip, maybe in the
// goroutine that writes a large body, where a panic would end the
// process).
func (p *Proxy) tell(o Observer, call *Call, up *Upstream) (s ResponseSink) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("an observer failed; it sees nothing of this attempt", "call", call.ID, "observer", fmt.Sprintf("%T", o), "err", errPanic(v))
			s = nil
		}
	}()
	return o.Request(call, up)
}

// observed is what observe allocates for an attempt, in one piece.
type observed struct {
	up    Upstream
	usage usageWatch
	sinks [4]ResponseSink // room for the usual observers; more grow the slice
}

func (s sinkList) empty() bool { return len(s.s) == 0 }

func (s sinkList) Response(info *ResponseInfo) {
	for i, k := range s.s {
		if k != nil {
			s.response(i, k, info)
		}
	}
}

func (s sinkList) Event(ev *sse.Event, seq int, at time.Duration) {
	if ev.HasData && !ev.Truncated {
		s.watch(func(w *conv.UsageWatcher) { w.Event(ev.Data) })
	}
	for i, k := range s.s {
		if k != nil {
			s.event(i, k, ev, seq, at)
		}
	}
}

func (s sinkList) Body(p []byte) {
	s.watch(func(w *conv.UsageWatcher) { w.Body(p) })
	for i, k := range s.s {
		if k != nil {
			s.body(i, k, p)
		}
	}
}

func (s sinkList) End(end End) {
	s.watch(func(w *conv.UsageWatcher) { end.Usage, end.UsageModel, end.Answer = w.Raw(), w.Model(), w.Answer() })
	for i, k := range s.s {
		if k != nil {
			s.end(i, k, end)
		}
	}
}

// One call of one sink each, under recoverSink.
func (s sinkList) response(i int, k ResponseSink, info *ResponseInfo) {
	defer s.recoverSink(i)
	k.Response(info)
}

func (s sinkList) event(i int, k ResponseSink, ev *sse.Event, seq int, at time.Duration) {
	defer s.recoverSink(i)
	k.Event(ev, seq, at)
}

func (s sinkList) body(i int, k ResponseSink, p []byte) {
	defer s.recoverSink(i)
	k.Body(p)
}

func (s sinkList) end(i int, k ResponseSink, end End) {
	defer s.recoverSink(i)
	k.End(end)
}

// watch runs f on the usage watcher, if there is one and it is on; a
// panic turns it off for the rest of the attempt.
func (s sinkList) watch(f func(*conv.UsageWatcher)) {
	if s.usage == nil || s.usage.off {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			s.usage.off = true
			if s.log != nil {
				s.log.Error("the usage watcher failed; the call is counted without a usage", "call", s.id, "err", errPanic(v))
			}
		}
	}()
	f(&s.usage.w)
}

// recoverSink takes sink i out of the list when it panicked.
func (s sinkList) recoverSink(i int) {
	v := recover()
	if v == nil {
		return
	}
	if s.log != nil {
		s.log.Error("an observer failed; it sees nothing more of this call", "call", s.id, "sink", fmt.Sprintf("%T", s.s[i]), "err", errPanic(v))
	}
	s.s[i] = nil
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
	if sinks.empty() {
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
	// This goroutine is not the handler's: a panic here (a decoder, the
	// event reader, the first-token watch, the usage watcher) would end
	// the process. It ends the side copy instead; the client's copy goes
	// on (the deferred drain above runs after this recover).
	defer func() {
		if v := recover(); v != nil && t.sinks.log != nil {
			t.sinks.log.Error("decoding the body for the observers failed; they see no more of it", "call", t.sinks.id, "err", errPanic(v))
		}
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

// urlMemo prints a URL once for the calls that go to it: URL.String
// builds the string each time, and a call's observers want it printed.
// It keeps the last urlMemoSize URLs printed (a proxy's calls go to a
// few: a route's chat path, its models, a second route), the oldest
// replaced by the next one missing.
type urlMemo struct {
	last [urlMemoSize]atomic.Pointer[printedURL]
	next atomic.Uint32
}

const urlMemoSize = 4

type printedURL struct {
	u url.URL
	s string
}

func (m *urlMemo) of(u *url.URL) string {
	for i := range m.last {
		if l := m.last[i].Load(); l != nil && l.u == *u {
			return l.s
		}
	}
	l := &printedURL{u: *u, s: u.String()}
	m.last[m.next.Add(1)%urlMemoSize].Store(l)
	return l.s
}
