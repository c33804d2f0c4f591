package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/sse"
)

// Call describes one request passing through the proxy. Hooks may read
// it; only the proxy writes it.
type Call struct {
	// ID identifies the call in logs and captures.
	ID string
	// Route is the name of the route the request took.
	Route string
	// Method, Path and RawQuery are as the client sent them (Path without
	// the route prefix).
	Method, Path, RawQuery string
	// Header is the client's request header. Hooks must not modify it.
	Header http.Header
	// Chat reports whether the request is a chat completions request whose
	// body was parsed (View is then non-nil).
	Chat bool
	// View is the conversation model's view of the body: as it stands
	// after the transforms run so far (the last transform's output is
	// parsed again only when a later transform or a finisher needs it).
	// Nil for non-chat requests, bodies that are not valid JSON and bodies
	// over the size limit.
	View *conv.Request
	// ClientBody is the body as received from the client (nil when it was
	// streamed through unread). It, View, and the bodies the transforms
	// return are valid until the call ends: a hook that keeps a byte or a
	// string of them longer copies it, or takes a Hold.
	ClientBody []byte
	// Conversation is the conversation key (conv.ConversationKey), "" for
	// non-chat requests.
	Conversation string
	// Model is the request's "model" field.
	Model string
	// Stream reports whether the client asked for a stream.
	Stream bool
	// Start is when the proxy received the request.
	Start time.Time
	// Internal marks requests the proxy made on its own; Parent is then
	// the ID of the call that caused it and Purpose what it was for
	// (given to Do).
	Internal bool
	Parent   string
	Purpose  string
	// Retry is true on the second attempt the proxy makes after a
	// Retrier asked for it: transforms that can be retried without must
	// then leave the body alone.
	Retry bool
	// ReadsResponse, set by a transform, asks the upstream for an
	// uncompressed answer (Accept-Encoding is not forwarded): finishers
	// see only uncompressed responses, and a transform that needs its
	// finisher for every response (the deliberate tool, which must hide
	// its call) sets it.
	ReadsResponse bool

	// Reasoning counts the reasoning blocks of the request as sent
	// upstream; the shaping transform sets it, the capture records it.
	Reasoning ReasoningCount

	times callTimes // when the upstream answered (metrics and the log line)
	// clientFirst is when the answer's first bytes were flushed to the
	// client (Since, in ns; 0: not yet), set by the client's writer, which
	// a finish session's keep-alive beats also write through.
	clientFirst atomic.Int64
	read        time.Duration // when the body's last byte came (Since), the body read whole; 0: not read whole
	// steps are when the steps of a chat request's hold ended, counted
	// from read: the parse's, then each transform's (holdStep).
	steps [maxHoldSteps]time.Duration

	values     []keyValue // typed per-call values (Key)
	valueRoom  [2]keyValue
	p          *Proxy
	clientView *conv.Request
	nextView   *conv.Request // the view a transform gave of its output (SetView)
	nextLater  *conv.Applied // or the edits it applied, their view to make (SetViewLater)
	later      *conv.Applied // the edits the last transform applied, whose view View waits for (settle)
	// settleParse is what the parse left for after the hold (settle).
	settleParse func()
	bodies      bodies // the large bodies given back when the call ends (Hold)
	changedBy   []RequestTransform
	beside      work // Beside's, for the attempt about to go upstream
	after       work // After's, every attempt's
	route       *Route
}

// ClientView is the view of ClientBody, the request as the client sent it
// (View is the view of the request as the transforms left it); nil when
// View is nil at the start.
func (c *Call) ClientView() *conv.Request { return c.clientView }

// ReasoningCount counts the reasoning blocks of an outgoing request.
type ReasoningCount struct {
	Shaped int // blocks shaped before sending
	Raw    int // blocks sent as the client sent them
}

// Key is a typed slot for a per-call value, owned by the hook that
// declares it (a transform handing its decision to its own response sink,
// or to the second attempt of a retried call). Values are set and read on
// the request path; a Key is not for concurrent use on one Call.
type Key[T any] struct{ _ byte } // not zero-size: every key has its own address

// NewKey returns a new key; declare it once, at package level.
func NewKey[T any]() *Key[T] { return new(Key[T]) }

// Set stores v on the call.
func (k *Key[T]) Set(c *Call, v T) {
	for i := range c.values {
		if c.values[i].k == k {
			c.values[i].v = v
			return
		}
	}
	if c.values == nil {
		c.values = c.valueRoom[:0] // a call holds a few values: no map, no allocation
	}
	c.values = append(c.values, keyValue{k, v})
}

// Get returns the value stored on the call, and whether there was one.
func (k *Key[T]) Get(c *Call) (T, bool) {
	for i := range c.values {
		if c.values[i].k == k {
			v, ok := c.values[i].v.(T)
			return v, ok
		}
	}
	var zero T
	return zero, false
}

// keyValue is a value stored on a call under a Key.
type keyValue struct{ k, v any }

// Annotator is implemented by observers that record what hooks note about
// a call (the capture log).
type Annotator interface {
	Annotate(call *Call, where string, data []byte)
}

// Annotate hands a hook's note about the call (a small JSON document;
// never reasoning or tool output) to every observer that records notes.
// where names the hook ("review", "guard").
func (c *Call) Annotate(where string, data []byte) {
	if c.p == nil {
		return
	}
	for _, o := range c.p.opts.Observers {
		if a, ok := o.(Annotator); ok {
			a.Annotate(c, where, data)
		}
	}
}

// Do sends a chat request the proxy makes on its own, on behalf of this
// call (a review's child or continuation): see Proxy.do. purpose names
// what it is for ("review-child", "deliberate-branch", …); the internal
// call carries it in Call.Purpose.
func (c *Call) Do(ctx context.Context, purpose string, body []byte) (*http.Response, *Call, error) {
	if c.p == nil || c.route == nil {
		return nil, nil, errors.New("proxy: Do needs a call the proxy made")
	}
	return c.p.do(ctx, c, purpose, body)
}

// DoRead is Do for an answer read whole: at most limit bytes of it, and
// an error unless the upstream answered 200. The internal call is returned
// whenever it was made (for its ID).
func (c *Call) DoRead(ctx context.Context, purpose string, body []byte, limit int64) ([]byte, *Call, error) {
	resp, child, err := c.Do(ctx, purpose, body)
	if err != nil {
		return nil, child, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, child, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, child, fmt.Errorf("%s: upstream answered %d", purpose, resp.StatusCode)
	}
	return out, child, nil
}

// Beside gives the proxy work a transform has left once it has made its
// output, work the request need not wait for (counters, a queue to the
// disk): f runs beside the request's trip upstream (on the proxy's own
// HTTP/1.1 transport once the request is flushed, in a goroutine the
// trip has anyway; otherwise in one of its own, started before the
// trip; after the failure when the trip fails first), and the call waits
// for it before it reads the answer, so f is done before the observers
// or the client see anything of it. It runs once, for the attempt whose
// transforms gave it, and not at all when the transform that gave it
// fails (its output is skipped: so is its work); it may read the call's
// bodies and views (they are held until the call ends) but not change
// the call. A panic in f is logged and the call goes on.
func (c *Call) Beside(f func()) { c.beside = append(c.beside, f) }

// After gives the proxy work a transform has left that neither the
// request nor its answer need wait for, only the conversation's next
// request (a cache to fill, counters, a queue to the disk): f runs once
// the call's answer is the client's — its last byte written and flushed —
// or the call ended without one, in the call's goroutine, before the
// call's bodies are released (f may read them and the call's views, but
// not change the call). Work given by
// every attempt runs, in order; not the work of a transform that failed
// (its output is skipped: so is its work). A panic in f is logged and the
// others still run.
//
// A client that sends its next request as soon as it has the answer may
// find f not done yet: what f leaves must only save that request work,
// never change what it sends.
func (c *Call) After(f func()) { c.after = append(c.after, f) }

// RunAfter runs, in the caller's goroutine and in order, the work the
// transforms gave the call with After that has not run yet: for a caller
// that runs transforms itself, outside the proxy (a replay, a test). The
// proxy runs that work on its own.
func (c *Call) RunAfter() { c.after.take().run() }

// RunBeside runs, in the caller's goroutine and in order, the work the
// transforms gave the call with Beside that has not run yet: for a
// caller that runs transforms itself, outside the proxy (a replay, a
// test). The proxy runs that work on its own.
func (c *Call) RunBeside() { c.beside.take().run() }

// work is what a call's transforms left for the proxy to run later
// (Beside, After), in the order given.
type work []func()

// take empties w and returns what it held.
func (w *work) take() work {
	fs := *w
	*w = nil
	return fs
}

// cut drops what was given after the first n (a failed transform's).
func (w *work) cut(n int) {
	clear((*w)[n:])
	*w = (*w)[:n]
}

// run runs each in order, in the caller's goroutine.
func (w work) run() {
	for _, f := range w {
		f()
	}
}

// Since returns the time elapsed since the call started.
func (c *Call) Since() time.Duration { return time.Since(c.Start) }

// RequestTransform rewrites the body of a parsed chat request before it
// goes upstream. It must not modify body in place: it returns the body to
// send (body itself when it has nothing to do). An error or a panic skips
// the transform: the request goes on with the body it had before it, and
// the failure is counted and logged.
//
// A body it returns is the call's from then on: a buffer of
// internal/bigbuf (what conv.ApplyEdits and conv.Request.Apply make) goes
// back to bigbuf's free list when the call ends, so the transform keeps
// no reference to it, nor to any view of it, past the call (a copy, or a
// Call.Hold).
type RequestTransform interface {
	TransformRequest(ctx context.Context, call *Call, body []byte) ([]byte, error)
}

// RequestTransformFunc adapts a function to RequestTransform.
type RequestTransformFunc func(ctx context.Context, call *Call, body []byte) ([]byte, error)

// TransformRequest calls f.
func (f RequestTransformFunc) TransformRequest(ctx context.Context, call *Call, body []byte) ([]byte, error) {
	return f(ctx, call, body)
}

// Retrier is a RequestTransform that can be left out of a second attempt.
// When the upstream answers a request the transform changed with a status
// of 400 or more, the proxy asks RetryWithout (errBody holds up to 64 KiB
// of the answer). If it returns true, the proxy sends the request once
// more with Call.Retry set, and the first answer never reaches the client.
// Only one retry is ever made for a call. A Retrier that panics is taken
// to ask for nothing.
type Retrier interface {
	RetryWithout(call *Call, status int, errBody []byte) bool
}

// Upstream describes the request as it was sent upstream.
type Upstream struct {
	Method string
	URL    string
	// Header is the header as sent. The proxy does not change it once
	// the observers have it, and they must not either: they may keep it
	// without a copy.
	Header http.Header
	// Body is the body as sent (nil when the body was streamed through
	// unread because it was over the size limit).
	Body []byte
	// At is when the request was handed to the transport, since the
	// call's start (Call.Since): the observers may be told of it later.
	At time.Duration
}

// ResponseInfo describes the upstream response when its header arrives.
type ResponseInfo struct {
	Status int
	// Header is the upstream's header. As with Upstream.Header, neither
	// the proxy nor the observers change it: they may keep it.
	Header http.Header
	// Stream reports whether the body is an SSE stream.
	Stream bool
	// Encoded reports whether the body was compressed on the wire; the
	// events and body bytes given to a ResponseSink are then decoded.
	Encoded bool
	// At is when the header came, counted from the call's start (0 for
	// an internal call's answer, told at once).
	At time.Duration
}

// Outcome says how a call ended.
type Outcome string

// The outcomes of a call.
const (
	OutcomeComplete        Outcome = "complete"
	OutcomeClientCancelled Outcome = "client_cancelled"
	OutcomeUpstreamError   Outcome = "upstream_error"
	OutcomeTimeout         Outcome = "timeout"
	// OutcomeRetried ends an attempt whose answer was dropped because a
	// Retrier asked for a second attempt.
	OutcomeRetried Outcome = "retried"
	// OutcomeBadRequest ends a call whose request body could not be read
	// whole (cut short, malformed chunking): the client got a 400.
	OutcomeBadRequest Outcome = "bad_request"
	// OutcomeShutdown ends a call cut because the program was stopping
	// and the call outlasted the grace period (or a second signal came).
	OutcomeShutdown Outcome = "shutdown"
)

// End summarises a finished call.
type End struct {
	Outcome  Outcome
	Status   int
	Duration time.Duration
	// Bytes is the number of response body bytes written to the client.
	Bytes  int64
	Events int
	// Err is a short description of what went wrong, "" when complete.
	Err string
	// Usage is the usage object the response reported, as the upstream
	// wrote it (conv.UsageWatcher: Anthropic's two objects merged), nil
	// when it reported none; UsageModel is the model named beside it.
	Usage      []byte
	UsageModel string
	// Answer is what a non-stream body of up to 64 KiB said, read once
	// for every sink (conv.ReadAnswer: its usage, model and first choice),
	// nil otherwise. It points into the body: valid during End.
	Answer *conv.Answer
}

// Observer watches calls. Its methods run on the request path and must
// not block: hand work to a bounded queue and count what is dropped.
type Observer interface {
	// Request is called once per upstream attempt, with the request
	// exactly as sent (Upstream.At says when): for a client's call,
	// beside its trip, once it is on its way (a failed send included;
	// before it, on a transport other than the proxy's own when no
	// transform left work beside the trip), before its answer is read,
	// except that a body the proxy's own transport wrote aside (over 64
	// KiB) with no transform's work beside the trip is told of once its
	// answer's first bytes are on their way to the client when that
	// answer is a body copied as it comes (a stream, an answer a
	// finisher holds and a failed trip are told of first); for an internal call
	// (Call.Do), before it. It returns the sink for that attempt's
	// response, or nil to see nothing more of it. A panic leaves the
	// observer out of the attempt.
	Request(call *Call, up *Upstream) ResponseSink
}

// ResponseSink receives one response as it passes to the client.
type ResponseSink interface {
	// Response is called once the response header arrived (info.At): at
	// once for a stream or an answer a finisher holds, and for a body the
	// proxy copies as it comes, once its first bytes are on their way to
	// the client (what the observers do is no part of its latency). It is
	// not called when the upstream could not be reached.
	Response(info *ResponseInfo)
	// Event is called for each SSE event as it arrives from upstream,
	// before the proxy writes it to the client (an event too long to
	// hold, after its pieces went out). ev's slices are only valid during
	// the call. at is the time since the call started. An event longer
	// than Options.MaxEventBytes comes with ev.Truncated set: Raw and Data
	// hold its beginning, Size its whole length.
	Event(ev *sse.Event, seq int, at time.Duration)
	// Body is called with the bytes of a non-stream body as they pass.
	Body(p []byte)
	// End is called once when the call is over.
	End(end End)
}
