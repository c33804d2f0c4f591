package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/internal/prefault"
)

// forward runs one request through the pipeline: read the body, parse and
// transform chat requests, send upstream, stream the response back.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, route *Route, path string) {
	call := &Call{
		ID: newCallID(), Route: route.Name, Method: r.Method, Path: path,
		RawQuery: r.URL.RawQuery, Header: r.Header, Start: time.Now(), route: route, p: p,
	}
	ctx := p.begin(w, r, call) // the response carries the call id; a stop can cut the call
	defer p.end(call)
	defer call.releaseBodies() // after every hook and observer saw the call: the large bodies go back (Hold)
	p.metrics.inflight.Inc()
	defer p.metrics.inflight.Dec()
	cw := newClientWriter(w, p.opts.ClientIdleTimeout, call)
	w = cw
	defer p.runAfter(call) // before the bodies go back
	defer cw.extend()      // the server's last write, after the handler, gets its own deadline
	body, keys, rest, err := p.readBody(cw.rc, r)
	if err != nil {
		p.finish(call, nil, p.badBody(w, err))
		return
	}
	if body != nil {
		call.read = max(call.Since(), 1)
		call.own(body)
		call.ClientBody = body
		if isChatPath(r.Method, path) {
			p.parse(call, body, keys)
			call.stepDone(0)
		}
	}
	for {
		out := p.transform(ctx, call, body)
		up := p.newUpstreamRequest(ctx, call, r, route, path, out, rest)
		if !p.exchange(w, call, up, out) {
			return
		}
		call.Retry = true
		p.metrics.retries.WithLabelValues(call.Route).Inc()
	}
}

// runAfter runs the work the transforms left for after the answer
// (Call.After). The client has it by then: exchange flushes what it
// copies, a whole answer before it returns, and a stream's events as they
// come (its end, the last chunk of an undeclared length, waits for the
// work); TestAfter fails when it does not.
func (p *Proxy) runAfter(call *Call) {
	for _, f := range call.after.take() {
		p.safeBeside(call, f)
	}
}

// isChatPath reports whether a request is a chat completions call.
func isChatPath(method, path string) bool {
	return method == http.MethodPost && strings.HasSuffix(strings.TrimSuffix(path, "/"), "/chat/completions")
}

// parse fills the call's chat fields from the body. A body that is not a
// chat request leaves them empty; it is forwarded untouched.
//
// A conversation's request repeats the history of its previous one: the
// Reparser takes the messages it repeats from that one's view instead of
// validating and parsing them again.
func (p *Proxy) parse(call *Call, body []byte, keys conv.BodyKeys) {
	view, settle, err := p.reparse.ParseKeyedLater(body, keys)
	call.settleParse = settle // beside the trip: what only the next requests read
	if err != nil {
		return
	}
	call.Chat, call.View, call.clientView = true, view, view
	// A copy, bounded (conv.OwnModel): the model names keys of long-lived
	// caches (profiles, metric children, the meter's sets), and a string
	// of the body would keep the whole body alive with it.
	call.Model, call.Stream = conv.OwnModel(view.Model), view.Stream
	call.Conversation = p.keys.Key(view, call.Header.Get("X-Shaper-Conversation"))
}

// reparseBytes bounds the earlier requests the proxy keeps to parse the
// next ones faster (their bodies and their views).
const reparseBytes = 32 << 20

// SetView gives the proxy the view of the body a transform is about to
// return (v.Body must be that very slice, as conv.Request.Apply makes
// it): the proxy then hands it to the later transforms and the finishers
// instead of parsing the body again. A view of another body is ignored.
func (c *Call) SetView(v *conv.Request) { c.nextView = v }

// SetViewLater is SetView for a transform that returns a.Body: the proxy
// makes the view (a.View) only when something reads it. A later transform
// or a finisher gets it at once; otherwise it is made beside the trip
// upstream, once the request is on its way and before the observers are
// told of it, and until then View is the view before the transform. A
// large request goes out on the proxy's own transport as the pieces of
// a.AppendPieces, as with SetView.
func (c *Call) SetViewLater(a *conv.Applied) { c.nextLater = a }

// settle does what the parse and the last transform left for after the
// request's hold: the parse's bookkeeping for the next requests
// (conv.Reparser.ParseKeyedLater), then the view of the request sent,
// when the last transform left it to make (SetViewLater), made View; one
// that does not parse leaves View as it was. It runs beside the trip
// upstream (besideWork), or when the call ends before it.
func (c *Call) settle() {
	if f := c.settleParse; f != nil {
		c.settleParse = nil
		f()
	}
	a := c.later
	if a == nil {
		return
	}
	c.later = nil
	if v, err := a.View(); err == nil {
		c.View = v
	}
}

// transform runs the request transforms in order. A transform that fails
// or panics is skipped; the body it was given goes on.
func (p *Proxy) transform(ctx context.Context, call *Call, body []byte) []byte {
	if !call.Chat {
		return body
	}
	call.View, call.changedBy, call.later = call.clientView, nil, nil
	defer func() { call.nextView, call.nextLater = nil, nil }()
	for i, t := range p.opts.Transforms {
		call.nextView, call.nextLater = nil, nil
		beside := len(call.beside)
		after := len(call.after)
		out, err := safeTransform(ctx, t, call, body)
		call.stepDone(i + 1)
		if !sameBuffer(out, body) {
			call.own(out) // a body a transform returns is the call's (RequestTransform), taken or not
		}
		if err != nil {
			call.beside.cut(beside) // a skipped transform leaves no work beside either
			call.after.cut(after)   // nor after
			p.metrics.transformErrors.Inc()
			p.log.Warn("transform failed; request goes on without it", "call", call.ID, "transform", i, "err", err)
			continue
		}
		if !bytes.Equal(out, body) {
			body = out
			call.changedBy = append(call.changedBy, t)
			call.View = p.viewOf(call, body, i)
		}
	}
	return body
}

// viewOf returns the view of body, the output of transform i: the one the
// transform gave (SetView, or SetViewLater's, made now when a later
// transform or a finisher reads it, else left to settle), else a parse
// when a later transform or a finisher needs it (a long history costs
// milliseconds to parse), else the view as it was. A body that does not
// parse keeps the view as it was.
func (p *Proxy) viewOf(call *Call, body []byte, i int) *conv.Request {
	if v := call.nextView; v != nil && sameBytes(v.Body, body) {
		return v
	}
	now := i < len(p.opts.Transforms)-1 || len(p.opts.Finishers) > 0 // someone reads it before the trip
	if a := call.nextLater; a != nil && sameBytes(a.Body, body) {
		if !now {
			call.later = a
			return call.View
		}
		if v, err := a.View(); err == nil {
			return v
		}
		return call.View
	}
	if now {
		if v, err := conv.ParseRequest(body); err == nil {
			return v
		}
	}
	return call.View
}

func safeTransform(ctx context.Context, t RequestTransform, call *Call, body []byte) (out []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, fmt.Errorf("transform panicked: %v", v)
		}
	}()
	out, err = t.TransformRequest(ctx, call, body)
	if err == nil && out == nil {
		out = body
	}
	return out, err
}

// readBody reads the request body up to MaxBodyBytes, each read within
// the client idle timeout and the whole within RequestBodyTimeout. A
// larger body is not held: body is nil and rest streams all of it (what
// was read included), each read within the idle timeout.
func (p *Proxy) readBody(rc *http.ResponseController, r *http.Request) (body []byte, keys conv.BodyKeys, rest io.Reader, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, keys, nil, nil
	}
	limit := p.opts.MaxBodyBytes
	br := &bodyReader{r: r.Body, rc: rc, idle: p.opts.ClientIdleTimeout}
	if r.ContentLength > limit {
		return nil, keys, br, nil
	}
	br.total = monoNow().Add(p.opts.RequestBodyTimeout)
	if n := r.ContentLength; n > 0 && n <= maxPrealloc {
		// The usual body: its length declared, read into a buffer of
		// that length (the server's body ends there, or fails short).
		buf, fresh := bigbuf.MakeAsItComes(int(n)) // every byte read into, or the buffer dropped
		err = readKeyed(br, buf, &keys, fresh)
		if err == nil && r.ProtoMajor >= 2 {
			err = endOfStream(br)
		}
		br.release()
		if err != nil {
			bigbuf.Release(buf) // no reader saw it
			return nil, keys, nil, err
		}
		return buf, keys, nil, nil
	}
	// A larger declared length, or none: the body grows as its bytes
	// arrive, from maxPrealloc at most on the client's word alone.
	var b bytes.Buffer
	if r.ContentLength > 0 {
		b.Grow(maxPrealloc + bytes.MinRead) // ReadFrom wants MinRead free to see EOF
	}
	_, err = b.ReadFrom(io.LimitReader(br, limit+1))
	buf := b.Bytes()
	switch {
	case err != nil:
		br.release()
		return nil, keys, nil, err
	case int64(len(buf)) > limit:
		br.total = time.Time{} // streamed through from here: idle-bounded only
		return nil, keys, io.MultiReader(bytes.NewReader(buf), br), nil
	}
	br.release()
	return buf, keys, nil, nil
}

// readKeyed is io.ReadFull(r, buf), keying buf's bytes as they come
// (conv.BodyKeys: each read's while they are in the cache), in reads of
// at most keyedRead bytes. A fresh buf (bigbuf.MakeAsItComes) has its
// pages faulted in ahead of the reads, at least keyedRead by one call,
// where the system can (internal/prefault), instead of a page fault a
// page in the kernel's copy: from the second read on, so that a client
// that declares a length and sends nothing makes none of it resident.
func readKeyed(r io.Reader, buf []byte, keys *conv.BodyKeys, fresh bool) error {
	n, resident := 0, 0 // resident: buf's bytes faulted in so far, when fresh
	var err error
	for n < len(buf) && err == nil {
		end := min(len(buf), n+keyedRead)
		if fresh && n > 0 && end > resident {
			to := min(len(buf), max(end, resident+keyedRead)) // short reads: one call a keyedRead, not one a read
			prefault.Populate(buf[resident:to])
			resident = to
		}
		var m int
		m, err = r.Read(buf[n:end])
		n += m
		keys.Add(buf, n)
	}
	switch {
	case n == len(buf):
		return nil
	case n > 0 && err == io.EOF:
		return io.ErrUnexpectedEOF
	}
	return err
}

// keyedRead bounds a read of a body keyed as it comes: its bytes are
// still in the core's cache when they are keyed.
const keyedRead = 128 << 10

// endOfStream reads past a body's declared length, where only its end
// may come. Over HTTP/1 the server's body ends there by itself (what
// follows is the next request); an HTTP/2 stream goes on until the client
// ends it, and one that sends more than it declared is reset by the
// server as those bytes arrive: read up to its end, it says so, and the
// request is refused instead of going upstream cut at the declared
// length.
func endOfStream(r io.Reader) error {
	var one [1]byte
	for range 100 { // a read of nothing is asked again, a hundred times at most (as bufio)
		switch n, err := r.Read(one[:]); {
		case n > 0:
			return errBodyTooLong
		case err == io.EOF:
			return nil
		case err != nil:
			return err
		}
	}
	return io.ErrNoProgress
}

// errBodyTooLong is a request body longer than its Content-Length.
var errBodyTooLong = errors.New("longer than its Content-Length")

// maxPrealloc bounds what a declared Content-Length reserves before the
// bytes arrive.
const maxPrealloc = 2 << 20

// badBody answers a request whose body could not be read: 408 when the
// client was too slow, 400 when the body was cut short or malformed (a
// client that half-closed still reads the answer). The answer is written
// whatever the request's context says: the server cancels it on any read
// error, a half-close included.
func (p *Proxy) badBody(w http.ResponseWriter, err error) End {
	end := End{Outcome: OutcomeBadRequest, Status: http.StatusBadRequest, Err: "request body: " + describeBodyErr(err)}
	code, msg := "bad_request_body", "shaperproxy: the request body could not be read (cut short or malformed)"
	if isTimeout(err) {
		end.Outcome, end.Status = OutcomeTimeout, http.StatusRequestTimeout
		code, msg = "request_body_timeout", "shaperproxy: the request body did not arrive in time"
	}
	w.Header().Set("Connection", "close")
	writeError(w, end.Status, code, msg)
	if http.NewResponseController(w).Flush() != nil {
		end.Outcome, end.Status = OutcomeClientCancelled, 0
	}
	return end
}

// describeBodyErr says what was wrong with a request body, naming no
// byte of it.
func describeBodyErr(err error) string {
	switch {
	case isTimeout(err):
		return "timeout"
	case errors.Is(err, io.ErrUnexpectedEOF):
		return "cut short"
	case errors.Is(err, errBodyTooLong):
		return errBodyTooLong.Error()
	}
	return "malformed or unreadable"
}

// newUpstreamRequest builds the request to send upstream: same method,
// path (joined to the route's base), query and end-to-end headers (less
// Accept-Encoding when the proxy reads the answer itself: a finisher
// must read it).
func (p *Proxy) newUpstreamRequest(ctx context.Context, call *Call, r *http.Request, route *Route, path string, body []byte, rest io.Reader) *http.Request {
	target := new(url.URL)
	*target = *route.Upstream
	target.Path, target.RawPath = joinURLPath(route.Upstream, &url.URL{Path: path, RawPath: rawPathFor(r, path)})
	target.RawQuery = r.URL.RawQuery
	target.Fragment = ""
	target.Host = strings.TrimSuffix(target.Host, ":") // as NewRequest's removeEmptyPort
	// Built, not printed and parsed again (NewRequest would parse a URL
	// and make a header, both replaced).
	out := (&http.Request{
		Method: r.Method, URL: target, Host: target.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: upstreamHeader(r.Header, route.APIKey, call.ReadsResponse),
	}).WithContext(ctx)
	setBody(out, r, call, body, rest)
	return out
}

// upstreamHeader returns the header to send upstream: in less the
// hop-by-hop headers, the proxy's own and Expect (the proxy answered any
// "Expect: 100-continue" itself when it read the body; asked again, an
// upstream that sends no 100 would cost the transport's whole
// ExpectContinueTimeout), and Accept-Encoding when readsAnswer; with the
// route's key when it has one, and an empty User-Agent when the client
// sent none (the transport then sends none). When none of that changes
// in, in itself is returned, not a copy: the transport only reads it, and
// neither the proxy nor the observers change a header once it is sent
// (Upstream.Header).
func upstreamHeader(in http.Header, apiKey string, readsAnswer bool) http.Header {
	if !headerEdited(in, apiKey, readsAnswer) {
		return in
	}
	h := in.Clone()
	removeHopHeaders(h)
	removeOwnHeaders(h)
	delete(h, "Expect")
	if readsAnswer {
		delete(h, "Accept-Encoding")
	}
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""}
	}
	if apiKey != "" {
		h["Authorization"] = []string{"Bearer " + apiKey}
	}
	return h
}

// headerEdited reports whether upstreamHeader changes in.
func headerEdited(in http.Header, apiKey string, readsAnswer bool) bool {
	if _, ok := in["User-Agent"]; !ok || apiKey != "" {
		return true
	}
	if _, ok := in["Accept-Encoding"]; ok && readsAnswer {
		return true
	}
	for k := range in {
		if k == "Expect" || strings.HasPrefix(k, OwnHeaderPrefix) || slices.Contains(hopHeaders, k) {
			return true // Connection among them: it may name more
		}
	}
	return false
}

// setBody sets the upstream request's body: rest streamed through, or
// body, which the transport may send again (GetBody). A body among the
// call's large ones is held until the transport closes it (heldBody).
func setBody(out, in *http.Request, call *Call, body []byte, rest io.Reader) {
	switch {
	case rest != nil:
		out.Body, out.ContentLength = io.NopCloser(rest), in.ContentLength
	case call.owns(body):
		out.Body, out.ContentLength = newPiecedBody(call, body), int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return newHeldBody(call, body), nil }
	case len(body) > 0 || in.ContentLength == 0 && in.Method != http.MethodGet && in.Method != http.MethodHead:
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.ContentLength = int64(len(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		if len(body) == 0 {
			out.Body = http.NoBody
		}
	}
}

// rawPathFor keeps the client's escaping of the path when it had one.
func rawPathFor(r *http.Request, path string) string {
	raw := r.URL.EscapedPath()
	if raw == r.URL.Path {
		return ""
	}
	if i := len(raw) - len(url.PathEscape(path)); i >= 0 && strings.HasSuffix(raw, url.PathEscape(path)) {
		return raw[i:]
	}
	return ""
}

// joinURLPath joins the upstream base path and the request path with
// exactly one slash, keeping escaped forms (as net/http/httputil does).
func joinURLPath(a, b *url.URL) (path, rawpath string) {
	if a.RawPath == "" && b.RawPath == "" {
		return singleJoiningSlash(a.Path, b.Path), ""
	}
	apath, bpath := a.EscapedPath(), b.EscapedPath()
	aslash, bslash := strings.HasSuffix(apath, "/"), strings.HasPrefix(bpath, "/")
	switch {
	case aslash && bslash:
		return a.Path + b.Path[1:], apath + bpath[1:]
	case !aslash && !bslash:
		return a.Path + "/" + b.Path, apath + "/" + bpath
	}
	return a.Path + b.Path, apath + bpath
}

func singleJoiningSlash(a, b string) string {
	aslash, bslash := strings.HasSuffix(a, "/"), strings.HasPrefix(b, "/")
	switch {
	case aslash && bslash:
		return a + b[1:]
	case !aslash && !bslash && b != "":
		return a + "/" + b
	}
	return a + b
}

// hopHeaders are removed in both directions (RFC 9110 section 7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		delete(h, name) // already canonical: Del would canonicalise each again
	}
}

// OwnHeaderPrefix starts the headers addressed to the proxy itself
// (X-Shaper-Conversation, X-Shaper-Review): they are read, never forwarded.
const OwnHeaderPrefix = "X-Shaper-"

func removeOwnHeaders(h http.Header) {
	for k := range h {
		if strings.HasPrefix(k, OwnHeaderPrefix) {
			delete(h, k)
		}
	}
}

func newCallID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// errIdle is the error of an upstream body read after the stream idle
// timeout ended the attempt.
var errIdle = errors.New("upstream stream idle timeout")
