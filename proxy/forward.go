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
	"strings"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
)

// forward runs one request through the pipeline: read the body, parse and
// transform chat requests, send upstream, stream the response back.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, route *Route, path string) {
	call := &Call{
		ID: newCallID(), Route: route.Name, Method: r.Method, Path: path,
		RawQuery: r.URL.RawQuery, Header: r.Header, Start: time.Now(), route: route, p: p,
	}
	p.metrics.inflight.Inc()
	defer p.metrics.inflight.Dec()
	body, rest, err := readBody(r, p.opts.MaxBodyBytes)
	if err != nil {
		end := End{Outcome: OutcomeClientCancelled, Err: "reading the request body: " + err.Error()}
		if r.Context().Err() == nil { // the client is there but sent a broken body
			end.Status = http.StatusBadRequest
			writeError(w, end.Status, "bad_request_body", "shaperproxy: the request body could not be read")
		}
		p.finish(call, nil, end)
		return
	}
	if body != nil {
		call.ClientBody = body
		if isChatPath(r.Method, path) {
			p.parse(call, body)
		}
	}
	for {
		out := p.transform(r.Context(), call, body)
		up, err := p.newUpstreamRequest(r.Context(), r, route, path, out, rest)
		if err != nil {
			writeError(w, http.StatusBadGateway, "bad_upstream_request", "shaperproxy: could not build the upstream request")
			p.finish(call, nil, End{Outcome: OutcomeUpstreamError, Status: http.StatusBadGateway, Err: err.Error()})
			return
		}
		if !p.exchange(w, call, up, out) {
			return
		}
		call.Retry = true
		p.metrics.retries.WithLabelValues(call.Route).Inc()
	}
}

// isChatPath reports whether a request is a chat completions call.
func isChatPath(method, path string) bool {
	return method == http.MethodPost && strings.HasSuffix(strings.TrimSuffix(path, "/"), "/chat/completions")
}

// parse fills the call's chat fields from the body. A body that is not a
// chat request leaves them empty; it is forwarded untouched.
func (p *Proxy) parse(call *Call, body []byte) {
	view, err := conv.ParseRequest(body)
	if err != nil {
		return
	}
	call.Chat, call.View, call.clientView = true, view, view
	call.Model, call.Stream = view.Model, view.Stream
	call.Conversation = conv.ConversationKey(view, call.Header.Get("X-Shaper-Conversation"))
}

// transform runs the request transforms in order. A transform that fails
// or panics is skipped; the body it was given goes on.
func (p *Proxy) transform(ctx context.Context, call *Call, body []byte) []byte {
	if !call.Chat {
		return body
	}
	call.View, call.changedBy = call.clientView, nil
	for i, t := range p.opts.Transforms {
		out, err := safeTransform(ctx, t, call, body)
		if err != nil {
			p.metrics.transformErrors.Inc()
			p.log.Warn("transform failed; request goes on without it", "call", call.ID, "transform", i, "err", err)
			continue
		}
		if !bytes.Equal(out, body) {
			body = out
			call.changedBy = append(call.changedBy, t)
			// A view of the new body is needed by the next transform and
			// by finishers; parsing a long history costs milliseconds.
			if i < len(p.opts.Transforms)-1 || len(p.opts.Finishers) > 0 {
				if v, err := conv.ParseRequest(body); err == nil {
					call.View = v
				}
			}
		}
	}
	return body
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

// readBody reads the request body up to limit. A larger body is not held:
// body is nil and rest streams all of it (what was read included).
func readBody(r *http.Request, limit int64) (body []byte, rest io.Reader, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, nil, nil
	}
	if r.ContentLength > limit {
		return nil, r.Body, nil
	}
	var b bytes.Buffer
	if r.ContentLength > 0 {
		b.Grow(int(r.ContentLength) + bytes.MinRead) // one allocation: ReadFrom wants MinRead free to see EOF
	}
	if _, err := b.ReadFrom(io.LimitReader(r.Body, limit+1)); err != nil {
		return nil, nil, err
	}
	buf := b.Bytes()
	if int64(len(buf)) > limit {
		return nil, io.MultiReader(bytes.NewReader(buf), r.Body), nil
	}
	return buf, nil, nil
}

// newUpstreamRequest builds the request to send upstream: same method,
// path (joined to the route's base), query and end-to-end headers.
func (p *Proxy) newUpstreamRequest(ctx context.Context, r *http.Request, route *Route, path string, body []byte, rest io.Reader) (*http.Request, error) {
	target := *route.Upstream
	target.Path, target.RawPath = joinURLPath(route.Upstream, &url.URL{Path: path, RawPath: rawPathFor(r, path)})
	target.RawQuery = r.URL.RawQuery
	target.Fragment = ""
	out, err := http.NewRequestWithContext(ctx, r.Method, target.String(), nil)
	if err != nil {
		return nil, err
	}
	out.Header = r.Header.Clone()
	removeHopHeaders(out.Header)
	removeOwnHeaders(out.Header)
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // the transport then sends none
	}
	if route.APIKey != "" {
		out.Header.Set("Authorization", "Bearer "+route.APIKey)
	}
	setBody(out, r, body, rest)
	return out, nil
}

func setBody(out, in *http.Request, body []byte, rest io.Reader) {
	switch {
	case rest != nil:
		out.Body, out.ContentLength = io.NopCloser(rest), in.ContentLength
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
		h.Del(name)
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

// errIdle is the cause of a call cancelled by the stream idle timeout.
var errIdle = errors.New("upstream stream idle timeout")
