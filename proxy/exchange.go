package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
)

// exchange sends the upstream request and streams the response back to
// the client, telling the observers as it goes. It returns true, having
// written nothing to the client, when a Retrier asked for a second attempt.
//
// out runs under the call's context. The stream idle timer ends the
// attempt, never the call (whose context the finishers and a second
// attempt still use): it closes the upstream's body, and the reads that
// follow fail with errIdle. No context is made per attempt.
func (p *Proxy) exchange(w http.ResponseWriter, call *Call, out *http.Request, body []byte) (retry bool) {
	clientCtx := out.Context()
	p.debugRequest(call, body)
	// The observers are told of the request beside the trip, with the
	// transforms' work (besideWork): once it is on its way, before its
	// answer is read, or, for a large body's answer copied as it comes,
	// once its first bytes are out (besideWork.mayWait).
	sent := call.Since() // the hand-off upstream: the hold's end, the time the observers are told of
	bw := p.besideOf(call, out, body, sent)
	call.times = callTimes{hold: call.times.hold}
	if !call.Retry && call.read > 0 {
		call.times.hold = max(sent-call.read, 1) // the proxy's own work on the request, before its trip
	}
	resp, err := p.roundTrip(p.transportFor(call.route), out, bw)
	if err != nil {
		sinks := bw.observed() // told of the request before the client of the failure
		end := p.upstreamFailure(w, call, clientCtx, err)
		end.Duration = call.Since()
		sinks.End(end)
		p.finish(call, nil, end)
		return false
	}
	defer resp.Body.Close()
	call.times.header = call.Since()
	p.metrics.bytesTo(&p.metrics.bytesUpstream, "upstream").Add(float64(len(body)))
	info := &ResponseInfo{
		Status: resp.StatusCode, Header: resp.Header,
		Stream:  isEventStream(resp.Header),
		Encoded: contentEncoding(resp.Header) != "",
		At:      call.times.header,
	}
	p.debugResponse(call, info)
	// The idle limit covers every read of the body, the few the retry
	// question makes included.
	upBody := resp.Body
	ir := &idleReader{r: upBody, d: p.opts.StreamIdleTimeout, start: call.Start}
	if !inMemory(upBody) { // a body already read whole has no silence to time
		ir.t = time.AfterFunc(p.opts.StreamIdleTimeout, func() {
			ir.fired.Store(true)
			_ = upBody.Close() // a read waiting on the upstream returns; the transport drops the connection
		})
		defer ir.t.Stop()
	}
	resp.Body = readCloser{ir, upBody}
	if p.askRetry(call, resp, ir) {
		sinks := bw.observed()
		sinks.Response(info)
		sinks.End(End{Outcome: OutcomeRetried, Status: resp.StatusCode, Duration: call.Since()})
		return true
	}
	src := resp.Body
	fin := p.startFinish(call, info)
	var end End
	switch {
	case info.Stream && !info.Encoded:
		length := upstreamLength
		if fin != nil {
			length = noLength // the finisher may write more or less than the upstream sent
		}
		sinks := bw.observed() // before anything of the answer reaches the client
		p.writeHeader(w, resp, length)
		sinks.Response(info)
		end = p.copyEvents(w, src, call, sinks, fin, clientCtx)
	case fin != nil && !info.Stream:
		bw.observed().Response(info)
		end = p.copyHeldBody(w, resp, src, call, bw, fin, clientCtx)
	default:
		// The work beside the trip that may wait (besideWork.mayWait) is
		// done once the answer's first bytes are on their way.
		p.writeHeader(w, resp, upstreamLength)
		end = p.copyRaw(w, src, call, info, bw, true)
	}
	if end.Status == 0 { // else the proxy answered in the upstream's place (a finisher's 502)
		end.Status = resp.StatusCode
	}
	end = classifyEnd(end, ir.fired.Load(), clientCtx)
	end.Duration = call.Since()
	call.times.firstByte = ir.first
	if end.Outcome == OutcomeComplete {
		// The answer is whole: it goes to the client now, not when the
		// handler returns, so the observers' end of the call and the
		// metrics are no longer part of its latency. (A body of known
		// length is still sent in one write.)
		_ = http.NewResponseController(w).Flush()
	}
	bw.observed().End(end)
	p.finish(call, info, end)
	if end.Outcome == OutcomeUpstreamError || end.Outcome == OutcomeTimeout || end.Outcome == OutcomeShutdown {
		// Pass the truncation on as a truncation: closing the response
		// normally would end the chunked body cleanly and the client
		// would take a cut stream for a whole one.
		panic(http.ErrAbortHandler)
	}
	return false
}

// besideWork is the work of an attempt beside its trip upstream: telling
// the observers of the request (their sinks kept for the answer), then
// what the transforms gave (Call.Beside); run once, by whichever of the
// trip's goroutines gets to it first. None of it is the request's to wait
// for: it runs while the upstream reads the request and thinks, or, when
// it is the observers' alone and the request's body was over 64 KiB
// (mayWait), once the answer's first bytes are on their way to the
// client: after a large body's write the upstream is still reading it,
// and the work took a processor from it and landed on the answer
// (internal/bench/HISTORY.md, Session BN).
type besideWork struct {
	once sync.Once
	p    *Proxy
	call *Call
	out  *http.Request // what the observers are told of, with body
	body []byte
	at   time.Duration // when out was handed to the transport (Upstream.At)
	// sinks are the observers' for the answer, once Run has run.
	sinks sinkList
	fs    work
}

// besideOf takes the work the transforms gave for the attempt sending out
// (whose body is body, handed to the transport at sent), with the
// observers' to do; nil when there is neither.
func (p *Proxy) besideOf(call *Call, out *http.Request, body []byte, sent time.Duration) *besideWork {
	if len(call.beside) == 0 && len(p.opts.Observers) == 0 {
		call.settle() // nothing beside the trip to do it in
		return nil
	}
	return &besideWork{p: p, call: call, out: out, body: body, at: sent, fs: call.beside.take()}
}

// Run runs the work unless it has run, and returns when it is done (a
// call while another runs it waits for it). A nil besideWork does nothing.
func (b *besideWork) Run() {
	if b == nil {
		return
	}
	b.once.Do(func() {
		b.call.settle() // the parse's bookkeeping, and the view the observers read
		b.sinks = b.p.observe(b.call, b.out, b.body, b.at)
		for _, f := range b.fs {
			b.p.safeBeside(b.call, f)
		}
	})
}

// mayWait reports whether the work may wait for the answer: it is the
// observers' and the parse's bookkeeping alone, no transform's, which the
// client must not see the answer before (Call.Beside).
func (b *besideWork) mayWait() bool { return b != nil && len(b.fs) == 0 }

// observed runs the work, unless it has run, and returns the observers'
// sinks (none for a nil b).
func (b *besideWork) observed() sinkList {
	if b == nil {
		return sinkList{}
	}
	b.Run()
	return b.sinks
}

// roundTrip sends out and returns the answer's header, with the work
// beside the trip done by then. For a request the proxy's own HTTP/1.1
// transport sends itself (h1Transport.sends), the work runs in a
// goroutine the trip has anyway, once the request is flushed: the
// caller's, between the write and the read, or the one that writes a
// large body aside, after the write. Other requests and other transports get
// it in a goroutine of its own, started before the trip, or, when it is
// only the observers' to tell, in the caller's before the trip. A goroutine
// started per request wakes an idle thread of the runtime, which may
// take the processor from the very goroutine that is about to send the
// request (internal/bench/HISTORY.md, Session AW).
func (p *Proxy) roundTrip(rt http.RoundTripper, out *http.Request, bw *besideWork) (*http.Response, error) {
	if bw == nil {
		return rt.RoundTrip(out)
	}
	var resp *http.Response
	var err error
	switch h, ok := rt.(*h1Transport); {
	case ok && h.sends(out):
		resp, err = h.roundTripBeside(out, bw)
	case len(bw.fs) == 0: // the observers' alone: not worth a goroutine
		bw.Run()
		resp, err = rt.RoundTrip(out)
	default:
		go bw.Run()
		resp, err = rt.RoundTrip(out)
	}
	if !bw.mayWait() {
		bw.Run() // a transform's work is done before the answer is read: run here if no one did (a failed dial or write), else waited for
	}
	return resp, err // the rest not run yet (a failed dial or write, a large body's work that may wait) is run by what reads its sinks (observed)
}

func (p *Proxy) safeBeside(call *Call, f func()) {
	defer func() {
		if v := recover(); v != nil {
			p.metrics.transformErrors.Inc()
			p.log.Warn("work a transform left beside or after the request failed; the call goes on", "call", call.ID, "err", fmt.Sprint(v))
		}
	}()
	f()
}

// maxRetryInspect bounds how much of an error answer a Retrier sees.
const maxRetryInspect = 64 << 10

// askRetry asks the transforms that changed the request whether an error
// answer should be retried without them. When none does, the bytes read
// to ask are put back in front of the body.
//
// The idle timer (ir's) watches the upstream, not the decision: it is
// stopped while the Retriers decide, and set again when none retries.
func (p *Proxy) askRetry(call *Call, resp *http.Response, ir *idleReader) bool {
	if call.Retry || resp.StatusCode < 400 || len(call.changedBy) == 0 {
		return false
	}
	var retriers []Retrier
	for _, t := range call.changedBy {
		if r, ok := t.(Retrier); ok {
			retriers = append(retriers, r)
		}
	}
	if len(retriers) == 0 {
		return false
	}
	head, err := io.ReadAll(io.LimitReader(resp.Body, maxRetryInspect))
	resp.Body = readCloser{io.MultiReader(bytes.NewReader(head), resp.Body), resp.Body}
	if err != nil {
		return false
	}
	errBody := head
	if enc := contentEncoding(resp.Header); enc != "" {
		errBody = decodeAll(enc, head)
	}
	// Stop reports whether the timer was running: neither fired nor
	// stopped by the body's end.
	running := ir.stop()
	if !running && ir.fired.Load() {
		return false // the upstream went quiet while the head was read
	}
	for _, r := range retriers {
		if p.safeRetry(r, call, resp.StatusCode, errBody) {
			return true
		}
	}
	if running {
		ir.reset() // the rest of the body goes to the client, under the timer
	}
	return false
}

// safeRetry is r.RetryWithout; a Retrier that panics asks for nothing.
func (p *Proxy) safeRetry(r Retrier, call *Call, status int, errBody []byte) (retry bool) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("a retrier failed; the upstream's answer goes to the client", "call", call.ID, "retrier", fmt.Sprintf("%T", r), "err", errPanic(v))
			retry = false
		}
	}()
	return r.RetryWithout(call, status, errBody)
}

type readCloser struct {
	io.Reader
	io.Closer
}

// errClientWrite marks a failed write to the client.
var errClientWrite = errors.New("client write failed")

// classifyEnd turns the copy error recorded in end.Err into an outcome.
// idle is whether the stream idle timer ended the attempt.
func classifyEnd(end End, idle bool, clientCtx context.Context) End {
	switch {
	case end.Err == "":
		end.Outcome = OutcomeComplete
	case errors.Is(context.Cause(clientCtx), errShutdown):
		end.Outcome, end.Err = OutcomeShutdown, "cut: "+errShutdown.Error()
	case end.Outcome == OutcomeClientCancelled || clientCtx.Err() != nil:
		end.Outcome = OutcomeClientCancelled
	case idle:
		end.Outcome, end.Err = OutcomeTimeout, errIdle.Error()
	default:
		end.Outcome = OutcomeUpstreamError
	}
	return end
}

// writeHeader writes the upstream's response header to the client,
// without hop-by-hop headers, with the proxy's own call id (an
// upstream's, from a proxy behind this one, is replaced) and with the
// Content-Length length says (upstreamLength: the upstream's).
//
// resp.Header itself is never changed: the observers got it with the
// response (ResponseInfo.Header) and may keep it without a copy.
func (p *Proxy) writeHeader(w http.ResponseWriter, resp *http.Response, length int) {
	h := w.Header()
	id := h.Get(CallIDHeader)
	for k, vv := range resp.Header {
		h[k] = vv
	}
	removeHopHeaders(h)
	if id != "" {
		h.Set(CallIDHeader, id)
	}
	switch {
	case length == noLength:
		h.Del("Content-Length")
	case length >= 0:
		h.Set("Content-Length", strconv.Itoa(length))
	}
	w.WriteHeader(resp.StatusCode)
}

// The Content-Length writeHeader sends besides a length of its own.
const (
	upstreamLength = -1 // the upstream's, if it sent one
	noLength       = -2 // none: the body is not the upstream's
)

// copyEvents forwards an uncompressed SSE stream event by event: each
// event's exact bytes are written and flushed before the next is read. A
// finish session may hold back the last events and write their
// replacement when the stream has ended.
//
// What the proxy holds is bounded by MaxEventBytes: an event longer than
// that goes to the client piece by piece as it arrives (flushed as it
// goes), the observers get its beginning marked Truncated, and the finish
// session is left out of the rest of the stream (the events it held go
// out first, unchanged).
func (p *Proxy) copyEvents(w http.ResponseWriter, src io.Reader, call *Call, sinks sinkList, fin FinishSession, clientCtx context.Context) End {
	out := newEventWriter(w)
	c := &eventCopy{p: p, call: call, out: out, fin: fin}
	rd := sse.NewReaderOptions(src, sse.Options{MaxEvent: p.opts.MaxEventBytes, Spill: c.spill})
	tok := tokenWatch{done: !call.Chat}
	defer func() { call.times.firstToken = tok.at }()
	var end End
	var ev sse.Event // one for the stream: the sinks get its address, so a new one per event was an allocation
	for seq := 0; ; seq++ {
		var err error
		ev, err = rd.Next()
		if len(ev.Raw) > 0 {
			at := call.Since()
			tok.see(&ev, at)
			sinks.Event(&ev, seq, at)
			if c.pass(&ev) != nil {
				return clientGone(end)
			}
		}
		if c.abandoned {
			end.Err = errFinisherCut.Error()
			break
		}
		if err != nil {
			if c.spillErr != nil {
				return clientGone(end)
			}
			if !errors.Is(err, io.EOF) {
				end.Err = describeReadErr(err)
			}
			break
		}
	}
	switch {
	case c.held == nil:
	case end.Err == "" && !rd.Truncated():
		if err := p.finishHeld(clientCtx, call, c.fin, c.held, out); err != nil {
			end.Err = err.Error()
		}
	case c.fin != nil && !releasable(c.fin):
		// A cut stream whose held events the client must not get: it is
		// cut where the session began to hold, as a cut.
		if end.Err == "" {
			end.Err = errFinisherCut.Error()
		}
	default:
		_ = c.release() // a cut stream is passed on as the same cut
	}
	var werr error
	end.Bytes, end.Events, werr = out.stats()
	out.close()
	if werr != nil {
		return clientGone(end)
	}
	return end
}

// eventCopy is the state of copyEvents: the events a finish session
// holds back, within a bound.
type eventCopy struct {
	p         *Proxy
	call      *Call
	out       *EventWriter
	fin       FinishSession
	held      [][]byte
	heldBytes int
	spillErr  error
	abandoned bool // the held events could not go out: the stream is cut
}

// pass writes one event read whole (or counts one that already went out
// piece by piece), unless the finish session holds it back.
func (c *eventCopy) pass(ev *sse.Event) error {
	c.p.metrics.events.Inc()
	if ev.Truncated {
		c.p.metrics.truncated.Inc()
		c.p.metrics.truncatedBytes.Add(float64(ev.Size - int64(len(ev.Raw))))
		c.out.countEvent()
		return nil
	}
	if c.fin != nil && c.held == nil {
		hold, v := safeHold(c.fin, ev)
		if v != nil { // the session panicked: it is left out, the stream goes on
			c.p.holdFailed(c.call, c.fin, v)
			c.fin = nil
		}
		if !hold {
			return c.out.Write(ev.Raw)
		}
	}
	if c.fin != nil {
		c.held = append(c.held, bytes.Clone(ev.Raw))
		if c.heldBytes += len(ev.Raw); c.heldBytes > c.p.opts.MaxEventBytes {
			if err := c.release(); !errors.Is(err, errFinisherCut) { // too much to hold: the session is left out
				return err
			}
		}
		return nil
	}
	return c.out.Write(ev.Raw)
}

// spill writes a piece of an event too large to hold. The session is
// left out of the rest of the stream; what it held goes out first.
func (c *eventCopy) spill(b []byte) error {
	if err := c.release(); err != nil {
		c.spillErr = err
		return err
	}
	if err := c.out.writePart(b); err != nil {
		c.spillErr = err
		return err
	}
	return nil
}

// release writes the held events unchanged and leaves the finish session
// out of the rest of the stream.
//
// A session that says its held events must not go out (Withholder) is
// left out with them: the stream is cut there (errFinisherCut).
func (c *eventCopy) release() error {
	held := c.held
	if c.fin != nil && !releasable(c.fin) {
		c.p.log.Warn("the finisher held more than the proxy keeps and its events cannot go out as they came; the client's stream is cut", "call", c.call.ID)
		c.fin, c.held, c.heldBytes, c.abandoned = nil, nil, 0, true
		return errFinisherCut
	}
	c.fin, c.held, c.heldBytes = nil, nil, 0
	for _, raw := range held {
		if err := c.out.Write(raw); err != nil {
			return err
		}
	}
	return nil
}

// copyHeldBody reads a whole non-stream body, lets the finish session
// replace it, and writes the result with its own Content-Length.
func (p *Proxy) copyHeldBody(w http.ResponseWriter, resp *http.Response, src io.Reader, call *Call, bw *besideWork, fin FinishSession, clientCtx context.Context) End {
	sinks := bw.observed()
	body, err := io.ReadAll(io.LimitReader(src, p.opts.MaxBodyBytes+1))
	if err == nil && int64(len(body)) > p.opts.MaxBodyBytes {
		// Too large to hold: send it on as it comes, without the finisher.
		p.writeHeader(w, resp, upstreamLength)
		if _, werr := w.Write(body); werr != nil {
			return clientGone(End{})
		}
		bodyInPieces(sinks, body)
		end := p.copyRaw(w, src, call, &ResponseInfo{}, bw, false)
		end.Bytes += int64(len(body))
		return end
	}
	bodyInPieces(sinks, body)
	var end End
	if err != nil {
		p.writeHeader(w, resp, upstreamLength)
		n, _ := w.Write(body)
		end.Bytes, end.Err = int64(n), describeReadErr(err)
		return end
	}
	// Keep-alive beats run on their own goroutines: the lock keeps them
	// from writing while or after the body is written, and every one the
	// session started is stopped when it returns.
	var mu sync.Mutex
	committed, over := false, false
	var stops []func()
	beat := func() {
		mu.Lock()
		defer mu.Unlock()
		if over {
			return
		}
		if !committed {
			p.writeHeader(w, resp, noLength)
			committed = true
		}
		_, _ = w.Write([]byte("\n"))
		_ = http.NewResponseController(w).Flush()
	}
	keepAlive := func(period time.Duration) func() {
		stop := every(period, beat)
		mu.Lock()
		stops = append(stops, stop)
		mu.Unlock()
		return stop
	}
	out, ferr := safeEndBody(clientCtx, fin, body, keepAlive)
	abandon := errors.Is(ferr, ErrAbandon)
	switch {
	case abandon:
		p.log.Warn("finisher failed; the client gets an error instead of the body", "call", call.ID, "err", ferr)
	case ferr != nil || out == nil:
		if ferr != nil {
			p.log.Warn("finisher failed; the body goes out as it came", "call", call.ID, "err", ferr)
		}
		out = body
	}
	mu.Lock()
	started := stops
	mu.Unlock()
	for _, stop := range started {
		stop()
	}
	mu.Lock()
	defer mu.Unlock()
	over = true
	if clientCtx.Err() != nil {
		// The client left while the session held the body: a write now
		// would land in the connection's buffer and pass for delivered.
		return clientGone(end)
	}
	if abandon {
		if committed { // the header went out with the keep-alives: cut the body
			end.Err = errFinisherCut.Error()
			return end
		}
		n, werr := writeError(w, http.StatusBadGateway, "finisher_failed", "shaperproxy: "+errFinisherCut.Error()+"; retry the request")
		end.Bytes = int64(n)
		if werr != nil || http.NewResponseController(w).Flush() != nil {
			return clientGone(end)
		}
		// Sent whole; the call still ends as failed (and its connection
		// with it), since the upstream's answer never reached the client.
		end.Err, end.Status = errFinisherCut.Error(), http.StatusBadGateway
		return end
	}
	if !committed {
		length := upstreamLength
		if !bytes.Equal(out, body) {
			length = len(out)
		}
		p.writeHeader(w, resp, length)
	}
	n, werr := w.Write(out)
	end.Bytes = int64(n)
	if werr != nil {
		return clientGone(end)
	}
	return end
}

// bodyInPieces hands a held body to the sinks in the pieces copyRaw
// would have: a sink that keeps a bounded share of a body (or clones
// each piece) never gets one slice of many megabytes.
func bodyInPieces(sinks sinkList, body []byte) {
	for len(body) > 0 {
		n := min(len(body), 32<<10)
		sinks.Body(body[:n])
		body = body[n:]
	}
}

func safeEndBody(ctx context.Context, fin FinishSession, body []byte, keepAlive KeepAlive) (out []byte, err error) {
	defer func() {
		if v := recover(); v != nil {
			out, err = nil, errPanic(v)
		}
	}()
	return fin.EndBody(ctx, body, keepAlive)
}

// copyRaw forwards a body as it arrives, flushing after every read, and
// hands each piece to the observers once it is on its way to the client
// (their work is not part of its latency). When the body is compressed,
// the observers get the decoded bytes. A small answer goes out in one
// write: the first flush sends the header with it. When tell is set the
// observers are told of the response (Response) only then, with the tee
// they read it through made: before it, they would be.
func (p *Proxy) copyRaw(w http.ResponseWriter, src io.Reader, call *Call, info *ResponseInfo, bw *besideWork, tell bool) End {
	var tee *tee
	defer func() {
		tee = p.teeOnce(tee, bw, call, info, tell)
		tee.Close()
		if tee.tok.at > 0 {
			call.times.firstToken = tee.tok.at
		}
	}()
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var end End
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return clientGone(end)
			}
			end.Bytes += int64(n)
			_ = http.NewResponseController(w).Flush()
			tee = p.teeOnce(tee, bw, call, info, tell)
			tee.Write(buf[:n])
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				end.Err = describeReadErr(err)
			}
			tee = p.teeOnce(tee, bw, call, info, tell)
			end.Events = tee.Close()
			return end
		}
	}
}

// teeOnce returns t, or, the first time (t nil), runs the work beside the
// trip if it has not run, tells the observers' sinks of the response when
// tell is set and makes the tee they read it through.
func (p *Proxy) teeOnce(t *tee, bw *besideWork, call *Call, info *ResponseInfo, tell bool) *tee {
	if t != nil {
		return t
	}
	sinks := bw.observed()
	if tell {
		sinks.Response(info)
	}
	return p.newTee(sinks, call, info)
}

// copyBufs holds the buffers of copyRaw: one 32 KiB allocation per
// request would be most of the proxy's garbage.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func clientGone(end End) End {
	end.Outcome, end.Err = OutcomeClientCancelled, errClientWrite.Error()
	return end
}

// idleReader resets the idle timer after every read that returns, stops
// it at the body's end or error, and notes when the first byte came
// (since start).
type idleReader struct {
	r     io.Reader
	t     *time.Timer
	d     time.Duration
	start time.Time
	first time.Duration
	fired atomic.Bool // the timer closed the body: reads fail with errIdle
}

// stop stops the timer (none: a body read whole), reporting whether it
// was running.
func (i *idleReader) stop() bool { return i.t != nil && i.t.Stop() }

// reset starts the timer again, if there is one.
func (i *idleReader) reset() {
	if i.t != nil {
		i.t.Reset(i.d)
	}
}

// inMemory reports whether body says it is all in memory already (an
// h1Body whose answer came whole with its header): its reads cannot
// wait on the upstream.
func inMemory(body io.Reader) bool {
	m, ok := body.(interface{ inMemory() bool })
	return ok && m.inMemory()
}

func (i *idleReader) Read(p []byte) (int, error) {
	n, err := i.r.Read(p)
	if err != nil {
		// The body is over: what follows is not the upstream's silence.
		// When the timer had fired first, the timer cut the body, whatever
		// the read says: an upstream may answer the closed connection by
		// ending its stream cleanly (over TLS its close_notify can arrive
		// before the connection is gone), which must not pass for a whole
		// answer. A read that ended before the timer fired keeps its end.
		if !i.stop() && i.fired.Load() {
			err = errIdle
		}
	} else {
		i.reset()
	}
	if n > 0 && i.first == 0 {
		i.first = max(time.Since(i.start), 1)
	}
	return n, err
}

func isEventStream(h http.Header) bool {
	ct := strings.ToLower(h.Get("Content-Type"))
	return strings.HasPrefix(strings.TrimSpace(ct), "text/event-stream")
}

func contentEncoding(h http.Header) string {
	ce := strings.ToLower(strings.TrimSpace(h.Get("Content-Encoding")))
	if ce == "identity" {
		return ""
	}
	return ce
}

// upstreamFailure answers the client when no response came back. The
// message names the route (never the upstream's address or URL, which can
// hold a key) and says what failed: a certificate problem is named as one,
// and the log says which host presented it.
func (p *Proxy) upstreamFailure(w http.ResponseWriter, call *Call, clientCtx context.Context, err error) End {
	end := End{Err: describeErr(err)}
	which := "the upstream for route " + quote(call.Route)
	switch {
	case errors.Is(context.Cause(clientCtx), errShutdown):
		end.Outcome, end.Status, end.Err = OutcomeShutdown, http.StatusServiceUnavailable, "cut: "+errShutdown.Error()
		writeError(w, end.Status, "shutting_down", "shaperproxy: the proxy is stopping; the call was cut before the upstream answered")
		return end
	case clientCtx.Err() != nil:
		end.Outcome = OutcomeClientCancelled
		return end
	case isTimeout(err):
		end.Outcome, end.Status = OutcomeTimeout, http.StatusGatewayTimeout
		writeError(w, end.Status, "upstream_timeout", "shaperproxy: "+which+" did not answer in time ("+end.Err+")")
	case isCertErr(err):
		end.Outcome, end.Status = OutcomeUpstreamError, http.StatusBadGateway
		writeError(w, end.Status, "upstream_certificate", "shaperproxy: "+which+" presented a certificate the proxy does not trust ("+end.Err+"); to trust its CA, set ca_file on the route")
		p.log.Warn("upstream certificate not trusted", "call", call.ID, "route", call.Route, "host", call.route.Upstream.Host, "err", end.Err)
	default:
		end.Outcome, end.Status = OutcomeUpstreamError, http.StatusBadGateway
		writeError(w, end.Status, "upstream_unreachable", "shaperproxy: "+which+" could not be reached ("+end.Err+")")
	}
	p.metrics.upstreamErrors.WithLabelValues(call.Route, string(end.Outcome)).Inc()
	return end
}
