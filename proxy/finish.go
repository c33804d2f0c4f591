package proxy

import (
	"bytes"
	"strconv"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// finish records a finished call in the metrics and the log. The log line
// holds no body, header or key.
func (p *Proxy) finish(call *Call, info *ResponseInfo, end End) {
	end.Duration = time.Since(call.Start)
	// A model that answered takes a place in the label's set; any other
	// keeps its own label only if it has one already.
	model := p.metrics.models.label(call.Model, end.Outcome == OutcomeComplete && end.Status < 300)
	status := strconv.Itoa(end.Status)
	m := p.metrics
	m.counter(m.requests, call.Route, methodLabel(call.Method), status, string(end.Outcome), model).Inc()
	ts := m.timersOf(call.Route, model)
	ts.observer(&ts.duration, m.duration).Observe(end.Duration.Seconds())
	m.bytesTo(&m.bytesClient, "client").Add(float64(end.Bytes))
	p.observeTimes(call, info, end, ts)
	if end.Outcome == OutcomeUpstreamError || end.Outcome == OutcomeTimeout {
		if end.Status != 0 && info != nil {
			m.counter(m.upstreamErrors, call.Route, string(end.Outcome)).Inc()
		}
	}
	p.logCall(call, end)
}

// observeTimes records when the upstream answered: its response header,
// the first byte of its body, the first token of a chat stream, and how
// long a stream ran after its header; and when the answer's first bytes
// were flushed to the client.
func (p *Proxy) observeTimes(call *Call, info *ResponseInfo, end End, ts *callTimers) {
	m := p.metrics
	t := call.times
	if t.header > 0 {
		ts.observer(&ts.header, m.header).Observe(t.header.Seconds())
	}
	if t.hold > 0 {
		ts.observer(&ts.hold, m.hold).Observe(t.hold.Seconds())
		if call.Chat {
			p.observeSteps(call, t.hold)
		}
	}
	if t.firstByte > 0 {
		ts.observer(&ts.firstByte, m.firstByte).Observe(t.firstByte.Seconds())
	}
	if first := call.clientFirst.Load(); first > 0 {
		ts.observer(&ts.clientFirst, m.clientFirst).Observe(time.Duration(first).Seconds())
	}
	if t.firstToken > 0 {
		ts.observer(&ts.firstToken, m.firstToken).Observe(t.firstToken.Seconds())
	}
	if info != nil && info.Stream {
		ts.streamCount().Inc()
		if t.header > 0 && end.Duration > t.header {
			ts.observer(&ts.streamDuration, m.streamDuration).Observe((end.Duration - t.header).Seconds())
		}
	}
}

// callTimes are the moments of a call's answer, as durations since it
// started (0: not seen).
type callTimes struct {
	hold       time.Duration // from the body's last byte to the hand-off upstream (the first attempt's)
	header     time.Duration // the upstream's response header
	firstByte  time.Duration // the first byte of its body
	firstToken time.Duration // the first content or reasoning text of a chat stream
}

// tokenWatch notes when the first token of a chat stream came: the first
// event whose choices carry content or reasoning text. Once seen (or when
// done starts true, for other responses), events are no longer looked at.
type tokenWatch struct {
	done bool
	at   time.Duration
}

func (w *tokenWatch) see(ev *sse.Event, at time.Duration) {
	if w.done || !carriesToken(ev.Data) {
		return
	}
	w.done, w.at = true, max(at, 1)
}

// carriesToken reports whether a chat stream chunk's data carries content
// or reasoning text in a choice's delta.
func carriesToken(data []byte) bool {
	if !bytes.Contains(data, []byte(`"delta"`)) {
		return false
	}
	found := false
	gjson.GetBytes(data, "choices").ForEach(func(_, choice gjson.Result) bool {
		found = conv.DeltaHasText(choice.Get("delta"))
		return !found
	})
	return found
}
