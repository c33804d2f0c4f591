package capture

import (
	"bytes"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/accounting"
	"github.com/shaperproxy/shaperproxy/sse"
)

// CallData is one call read whole from the log: its upstream request
// (the body of the last attempt, rebuilt byte for byte), its response
// rebuilt field by field, and how it ended.
type CallData struct {
	Call, Parent, Purpose, Conversation string
	Route, Model                        string
	Internal, Stream                    bool
	// Time is when the request was sent.
	Time time.Time
	// Request is the body as sent upstream; nil when it could not be
	// rebuilt (RequestErr says why) or was not kept (over the size limit).
	Request    []byte
	RequestErr error
	// ReasoningShaped and ReasoningRaw are the request's reasoning blocks
	// shaped and sent as they were.
	ReasoningShaped, ReasoningRaw int
	// Response is the answer rebuilt from the upstream's events or body.
	Response conv.Response
	// Outcome and Status are the end's.
	Outcome string
	Status  int
	// Usage is the usage the upstream reported, as it wrote it (from the
	// end record, else from the response); nil when none.
	Usage []byte
}

// Kind is the call's kind (accounting.Kind).
func (c *CallData) Kind() string { return accounting.Kind(c.Internal, c.Purpose) }

// pendingCall is a call whose end has not been read yet.
type pendingCall struct {
	data *CallData
	asm  *conv.Assembler
	body []byte
}

// Calls reads the log forward and calls fn with every call whose request
// was sent at or after since (zero: all) once its end is read, in the
// order the calls ended. An attempt the proxy retried is replaced by the
// retry; a call without an end in the log is left out. Request bodies are
// rebuilt; an error from fn stops the read and is returned.
func Calls(r *Reader, since time.Time, fn func(*CallData) error) error {
	if err := r.refresh(); err != nil {
		return err
	}
	start := Pos{}
	if !since.IsZero() {
		start = r.seek(since)
	}
	open := map[string]*pendingCall{}
	_, err := r.forward(start, readOpts{filter: Filter{Since: since}, resolve: true}, func(l Located) error {
		return readCall(open, &l, fn)
	})
	return err
}

// readCall adds one record to the calls being read.
func readCall(open map[string]*pendingCall, l *Located, fn func(*CallData) error) error {
	rec := &l.Record
	if rec.Kind == KindRequest {
		open[rec.Call] = newPendingCall(l)
		return nil
	}
	p := open[rec.Call]
	if p == nil || rec.Where != whereWire && rec.Where != whereDecoded {
		return nil // not a call being read, or the client's side
	}
	switch rec.Kind {
	case KindEvent:
		if ev, err := sse.NewReader(bytes.NewReader(rec.Data)).Next(); err == nil && ev.HasData {
			_ = p.asm.AddChunk(ev.Data)
		}
	case KindBody:
		p.body = append(p.body, rec.Data...)
	case KindResponse:
		p.data.Status = rec.Status
	case KindEnd:
		delete(open, rec.Call)
		if rec.Outcome == string(outcomeRetried) {
			return nil
		}
		return fn(p.finish(rec))
	}
	return nil
}

// outcomeRetried ends an attempt the proxy dropped for a retry
// (proxy.OutcomeRetried).
const outcomeRetried = "retried"

func newPendingCall(l *Located) *pendingCall {
	r := &l.Record
	return &pendingCall{asm: conv.NewAssembler(), data: &CallData{
		Call: r.Call, Parent: r.Parent, Purpose: r.Purpose, Conversation: r.Conversation,
		Route: r.Route, Model: r.Model, Internal: r.Internal, Stream: r.Stream, Time: r.Time,
		Request: r.Data, RequestErr: l.Err, ReasoningShaped: r.ReasoningShaped, ReasoningRaw: r.ReasoningRaw,
	}}
}

// finish completes the call with its end record.
func (p *pendingCall) finish(end *Record) *CallData {
	if p.body != nil {
		_ = p.asm.AddBody(p.body)
	}
	d := p.data
	d.Response = p.asm.Response()
	d.Outcome = end.Outcome
	if end.Status != 0 {
		d.Status = end.Status
	}
	d.Usage = end.Usage
	if d.Usage == nil {
		d.Usage = d.Response.Usage
	}
	return d
}
