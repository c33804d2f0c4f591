package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
)

// Finisher may take over the end of a chat response: the masked review
// holds back the final events of a turn, asks for a second look, and lets
// the model revise before the client sees the turn end.
//
// A finisher that fails is left out and the answer goes out as the
// upstream sent it: a panic in Start, in a session's Hold (that session
// alone), End or EndBody, and an error from End or EndBody.
type Finisher interface {
	// Start returns a session for this response, or nil to leave it
	// alone. It is called when the response header arrives, only for
	// chat requests the client made, never for compressed bodies.
	Start(call *Call, info *ResponseInfo) FinishSession
}

// FinishSession handles the end of one response.
type FinishSession interface {
	// Hold is called for each stream event before it is written. Once it
	// returns true, that event and every later one are held back. The
	// proxy holds at most Options.MaxEventBytes: past that, or when an
	// event too long to keep comes, the held events go out unchanged and
	// the session is left out of the response (End is not called).
	Hold(ev *sse.Event) bool
	// End is called when the upstream stream ended cleanly, with the raw
	// bytes of the held events. It writes to out what the client gets in
	// their place: the same bytes, or a revision. ctx ends when the
	// client goes away. If End returns having written nothing, the held
	// events are written as they were, unless its error wraps ErrAbandon.
	// An error after End wrote something, or one that wraps ErrAbandon,
	// cuts the client's stream, as a cut upstream stream is passed on: a
	// revision that could not be finished is not presented as whole.
	End(ctx context.Context, held [][]byte, out *EventWriter) error
	// EndBody is called with a whole non-stream body and returns the body
	// to send (body itself to leave it). The proxy holds the response
	// header meanwhile. keepAlive(period) starts keep-alives: from the first
	// one the header is committed (without Content-Length), then a blank
	// line, which JSON readers ignore, goes out every period. They stop when
	// the returned func is called, and in any case when EndBody returns.
	// An error that wraps ErrAbandon answers the client with a 502 in the
	// OpenAI error shape (or cuts the body when a keep-alive committed
	// the header); any other error sends the body as it came.
	EndBody(ctx context.Context, body []byte, keepAlive KeepAlive) ([]byte, error)
}

// ErrAbandon, wrapped in the error of End or EndBody, says the session
// can neither finish the response nor let what it held go out as it came
// (it holds a call to a tool the proxy serves, and answering it failed):
// the call ends with an error instead.
var ErrAbandon = errors.New("the finisher abandoned the response")

// Withholder is a FinishSession that may hold events the client must not
// get unchanged (a call to a tool the proxy serves). When the proxy cannot
// hold more (Options.MaxEventBytes) and Releasable reports false, the
// client's stream is cut instead of the held events going out as they
// came.
type Withholder interface {
	Releasable() bool
}

// releasable reports whether the events s holds may go out unchanged.
func releasable(s FinishSession) bool {
	w, ok := s.(Withholder)
	return !ok || w.Releasable()
}

// KeepAlive starts a keep-alive that beats every period until stop is
// called.
type KeepAlive func(period time.Duration) (stop func())

// every calls beat every period until stop is called; stop returns once
// beat no longer runs and may be called more than once.
func every(period time.Duration, beat func()) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	var once sync.Once
	go func() {
		defer close(exited)
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				beat()
			}
		}
	}()
	return func() {
		once.Do(func() { close(done) })
		<-exited
	}
}

// EventWriter writes SSE events to the client, flushing each. It is safe
// for concurrent use (a keep-alive goroutine may write comments while a
// review runs).
type EventWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	written int64
	events  int // events written, comments not included
	err     error
}

func newEventWriter(w http.ResponseWriter) *EventWriter {
	return &EventWriter{w: w, rc: http.NewResponseController(w)}
}

// Write writes one whole event (its raw bytes, blank line included) and
// flushes it.
func (e *EventWriter) Write(raw []byte) error { return e.write(raw, true) }

// writePart writes and flushes a piece of an event too large to hold;
// countEvent counts the event once it has gone out whole.
func (e *EventWriter) writePart(p []byte) error { return e.write(p, false) }

func (e *EventWriter) countEvent() {
	e.mu.Lock()
	e.events++
	e.mu.Unlock()
}

// Comment writes an SSE comment line (": text"), which clients ignore.
func (e *EventWriter) Comment(text string) error {
	return e.write([]byte(": "+text+"\n\n"), false)
}

func (e *EventWriter) write(raw []byte, event bool) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return e.err
	}
	if _, err := e.w.Write(raw); err != nil {
		e.err = err
		return err
	}
	e.written += int64(len(raw))
	if event {
		e.events++
	}
	if err := e.rc.Flush(); err != nil {
		e.err = err
	}
	return e.err
}

// KeepAlive writes a comment every period until the returned func is
// called; stop returns once the comments have ended.
func (e *EventWriter) KeepAlive(period time.Duration, text string) (stop func()) {
	return every(period, func() { _ = e.Comment(text) }) // after an error, writes are no-ops
}

// close makes every later write fail: the response is over.
func (e *EventWriter) close() {
	e.mu.Lock()
	if e.err == nil {
		e.err = errWriterClosed
	}
	e.mu.Unlock()
}

var errWriterClosed = errors.New("proxy: the response is over")

func (e *EventWriter) stats() (int64, int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.written, e.events, e.err
}

// startFinish asks the finishers for a session for this response.
func (p *Proxy) startFinish(call *Call, info *ResponseInfo) FinishSession {
	if !call.Chat || call.Internal || info.Encoded || info.Status != http.StatusOK {
		return nil
	}
	var sessions []FinishSession
	for _, f := range p.opts.Finishers {
		if s := p.safeStart(f, call, info); s != nil {
			sessions = append(sessions, s)
		}
	}
	switch len(sessions) {
	case 0:
		return nil
	case 1:
		return sessions[0]
	}
	return &chain{s: sessions, p: p, call: call}
}

// chain runs the sessions of several finishers on one response, in the
// order of Options.Finishers: the stream is held from the first event any
// of them holds, and the first session that writes the end (or changes
// the body) wins; the others are not asked. A session that panics in Hold
// is left out (nil in s); the others go on.
type chain struct {
	s    []FinishSession
	p    *Proxy // for the log of a session left out
	call *Call
}

// Releasable reports whether every session lets the held events go out
// unchanged.
func (c *chain) Releasable() bool {
	for _, s := range c.s {
		if s != nil && !releasable(s) {
			return false
		}
	}
	return true
}

// Hold asks every session about each event until one holds.
func (c *chain) Hold(ev *sse.Event) bool {
	hold := false
	for i, s := range c.s {
		if s == nil {
			continue
		}
		h, v := safeHold(s, ev)
		if v != nil {
			c.s[i] = nil
			c.p.holdFailed(c.call, s, v)
			continue
		}
		hold = h || hold
	}
	return hold
}

// End lets each session end the stream in turn, until one writes (or
// abandons the response); the error is that session's. One that failed
// without writing is logged and the next is asked.
func (c *chain) End(ctx context.Context, held [][]byte, out *EventWriter) error {
	for _, s := range c.s {
		if s == nil {
			continue
		}
		_, before, _ := out.stats()
		err := safeEnd(ctx, s, held, out) // a panic is an error
		if _, after, _ := out.stats(); after != before || errors.Is(err, ErrAbandon) || ctx.Err() != nil {
			return err
		}
		if err != nil {
			c.p.log.Warn("finisher failed before it wrote; the next one is asked", "call", c.call.ID, "err", err)
		}
	}
	return nil
}

// EndBody lets each session end the body in turn, until one changes it.
func (c *chain) EndBody(ctx context.Context, body []byte, keepAlive KeepAlive) ([]byte, error) {
	var errs []error
	for _, s := range c.s {
		if s == nil {
			continue
		}
		out, err := safeEndBody(ctx, s, body, keepAlive)
		if err != nil {
			errs = append(errs, err)
		}
		if out != nil && !bytes.Equal(out, body) {
			return out, errors.Join(errs...)
		}
	}
	return body, errors.Join(errs...)
}

// finishHeld lets the session write the client's end of a stream, and
// writes the held events unchanged if it wrote nothing. It returns
// errFinisherCut when the stream must be cut instead: the session failed
// after it wrote, or abandoned the response.
func (p *Proxy) finishHeld(ctx context.Context, call *Call, fin FinishSession, held [][]byte, out *EventWriter) error {
	_, before, _ := out.stats()
	err := safeEnd(ctx, fin, held, out)
	_, after, werr := out.stats()
	if after == before && !releasable(fin) {
		// It wrote nothing (it failed, or panicked) and what it holds must
		// not go out as it came.
		p.log.Warn("finisher ended nothing and its held events cannot go out; the client's stream is cut", "call", call.ID, "err", err)
		return errFinisherCut
	}
	if err != nil {
		if after != before || errors.Is(err, ErrAbandon) {
			p.log.Warn("finisher failed; the client's stream is cut", "call", call.ID, "err", err)
			return errFinisherCut
		}
		p.log.Warn("finisher failed; the held events go out as they came", "call", call.ID, "err", err)
	}
	if after == before && werr == nil {
		for _, raw := range held {
			if out.Write(raw) != nil {
				return nil
			}
		}
	}
	return nil
}

// errFinisherCut is the end of a call whose finisher could not end it.
var errFinisherCut = errors.New("the finisher could not end the response")

// safeStart is f.Start; a finisher that panics is left out of the call
// (the answer goes out as it comes).
func (p *Proxy) safeStart(f Finisher, call *Call, info *ResponseInfo) (s FinishSession) {
	defer func() {
		if v := recover(); v != nil {
			p.log.Error("a finisher failed to start; the answer goes out without it", "call", call.ID, "finisher", fmt.Sprintf("%T", f), "err", errPanic(v))
			s = nil
		}
	}()
	return f.Start(call, info)
}

// safeHold is fin.Hold; panicked is what it panicked with, if it did.
func safeHold(fin FinishSession, ev *sse.Event) (hold bool, panicked any) {
	defer func() {
		if v := recover(); v != nil {
			hold, panicked = false, v
		}
	}()
	return fin.Hold(ev), nil
}

// holdFailed logs a session that panicked in Hold; it is left out of the
// rest of the response.
func (p *Proxy) holdFailed(call *Call, s FinishSession, v any) {
	p.log.Error("a finisher failed on an event; the stream goes on without it", "call", call.ID, "session", fmt.Sprintf("%T", s), "err", errPanic(v))
}

func safeEnd(ctx context.Context, fin FinishSession, held [][]byte, out *EventWriter) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = errPanic(v)
		}
	}()
	return fin.End(ctx, held, out)
}
