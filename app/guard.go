package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/capture"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/guard"
	"github.com/shaperproxy/shaperproxy/ledger"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// guardBucket holds each conversation's guard State in the ledger.
const guardBucket = "guard"

// maxProjections bounds the conversations whose fold is kept in memory;
// a conversation past it is folded again from the start (same result).
const maxProjections = 1024

// noteSignals carries a request's guard signals to its response;
// noteDecision its decision to a retry of the same request.
const (
	noteSignals  = "guard_signals"
	noteDecision = "guard_decision"
)

// guardHook is the ECHO/STALL guard: a request transform that places
// notices and lowers the effort, and an observer that measures STALL on
// responses. State lives in the ledger, so acknowledgements survive
// restarts.
type guardHook struct {
	g         *guard.Guard
	ledger    *ledger.Store
	capture   *capture.Writer // nil: capture off
	upstreams map[string]string
	log       *slog.Logger
	events    *prometheus.CounterVec

	mu    sync.Mutex
	projs map[string]*convProjection
}

type convProjection struct {
	mu sync.Mutex
	p  *guard.Projection
}

var (
	_ proxy.RequestTransform = (*guardHook)(nil)
	_ proxy.Observer         = (*guardHook)(nil)
)

func newGuardHook(g *guard.Guard, st *ledger.Store, upstreams map[string]string, log *slog.Logger) *guardHook {
	return &guardHook{
		g: g, ledger: st, upstreams: upstreams, log: log, projs: map[string]*convProjection{},
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_guard_events_total", Help: "Guard signals, by kind (echo_notice, stall_observed, stall_interrupted).",
		}, []string{"kind"}),
	}
}

// projection returns the conversation's fold, making one if needed.
func (h *guardHook) projection(conversation string) *convProjection {
	h.mu.Lock()
	defer h.mu.Unlock()
	if p, ok := h.projs[conversation]; ok {
		return p
	}
	if len(h.projs) >= maxProjections {
		for k := range h.projs { // drop any one: it will be folded again
			delete(h.projs, k)
			break
		}
	}
	p := &convProjection{p: h.g.NewProjection()}
	h.projs[conversation] = p
	return p
}

func (h *guardHook) state(conversation string) guard.State {
	var st guard.State
	if b, ok, err := h.ledger.Get(guardBucket, conversation, "state"); err == nil && ok {
		if err := st.UnmarshalBinary(b); err != nil {
			h.log.Warn("guard state unreadable; starting afresh", "err", err)
			st = guard.State{}
		}
	}
	return st
}

func (h *guardHook) save(conversation string, before, after guard.State) {
	a, _ := after.MarshalBinary()
	if b, _ := before.MarshalBinary(); bytes.Equal(a, b) {
		return
	}
	if err := h.ledger.Put(guardBucket, conversation, "state", a); err != nil {
		h.log.Warn("guard state not saved", "err", err)
	}
}

// TransformRequest folds the request's new messages, decides, and places
// the notices and the effort step-down.
func (h *guardHook) TransformRequest(_ context.Context, call *proxy.Call, body []byte) ([]byte, error) {
	if call.Internal || call.Conversation == "" {
		return body, nil
	}
	if call.Retry { // the same request again: the same decision, not a second one
		if dec, ok := call.Notes[noteDecision].(guard.Decision); ok {
			return h.apply(call, body, dec), nil
		}
		return body, nil
	}
	// One conversation's fold and state are read, decided and saved under
	// its lock, so overlapping requests of a conversation lose nothing.
	cp := h.projection(call.Conversation)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	sig, _ := cp.p.Update(call.View)
	call.Note(noteSignals, sig)
	st := h.state(call.Conversation)
	dec, next := h.g.Decide(st, call.View, sig)
	call.Note(noteDecision, dec)
	out := h.apply(call, body, dec)
	h.save(call.Conversation, st, next)
	h.record(call, dec.Events)
	return out, nil
}

// apply places the decision's notices and lowers the effort.
func (h *guardHook) apply(call *proxy.Call, body []byte, dec guard.Decision) []byte {
	out := body
	if len(dec.Placements) > 0 {
		if b, err := guard.ApplyPlacements(call.View, dec.Placements); err == nil {
			out = b
		} else {
			h.log.Warn("guard notice not placed", "call", call.ID, "err", err)
		}
	}
	if dec.StepDown {
		out, _ = guard.StepDown(out, h.g.Lowering(call.Route, h.upstreams[call.Route]), true)
	}
	return out
}

// record counts the events and writes them to the capture log (counts and
// effort only, never reasoning or tool output).
func (h *guardHook) record(call *proxy.Call, events []guard.Event) {
	for _, e := range events {
		h.events.WithLabelValues(e.Kind.String()).Inc()
		if h.capture == nil {
			continue
		}
		data, _ := json.Marshal(struct {
			Guard  string      `json:"guard"`
			Tool   string      `json:"tool,omitempty"`
			Count  int         `json:"count,omitempty"`
			Stall  guard.Stall `json:"stall"`
			Effort string      `json:"effort,omitempty"`
		}{e.Kind.String(), e.Tool, e.Count, e.Stall, e.Effort})
		h.capture.Enqueue(capture.Record{Kind: capture.KindNote, Call: call.ID, Route: call.Route, Model: call.Model, Where: "guard", Time: time.Now(), Data: data})
	}
}

// Request returns a sink that measures STALL on the response of a chat
// request the client made.
func (h *guardHook) Request(call *proxy.Call, _ *proxy.Upstream) proxy.ResponseSink {
	sig, ok := call.Notes[noteSignals].(guard.Signals)
	if !ok || call.Internal || call.Retry {
		return nil
	}
	return &guardSink{h: h, call: call, sig: sig, view: call.View}
}

// guardSink counts the reasoning characters of a response as it passes;
// it keeps no text (a stream can be gigabytes long).
type guardSink struct {
	h     *guardHook
	call  *proxy.Call
	view  *conv.Request
	sig   guard.Signals
	chars int
	body  []byte // a non-stream body, whole at End
}

func (s *guardSink) Response(*proxy.ResponseInfo) {}

func (s *guardSink) Event(ev *sse.Event, _ int, _ time.Duration) {
	if !ev.HasData || !bytes.Contains(ev.Data, []byte(`"reasoning`)) {
		return
	}
	for _, f := range [...]string{"choices.0.delta.reasoning_content", "choices.0.delta.reasoning"} {
		if r := gjson.GetBytes(ev.Data, f); r.Type == gjson.String {
			s.chars += utf8.RuneCountInString(r.Str)
			return
		}
	}
}

func (s *guardSink) Body(p []byte) {
	if len(s.body) < maxGuardBody {
		s.body = append(s.body, p...)
	}
}

// maxGuardBody bounds the non-stream body the guard keeps to measure.
const maxGuardBody = 16 << 20

func (s *guardSink) End(end proxy.End) {
	if end.Outcome != proxy.OutcomeComplete {
		return
	}
	if s.body != nil {
		asm := conv.NewAssembler()
		if asm.AddBody(s.body) != nil || len(asm.Response().Choices) == 0 {
			return
		}
		s.chars = guard.StepChars(asm.Response().Choices[0])
	}
	cp := s.h.projection(s.call.Conversation)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	st := s.h.state(s.call.Conversation)
	events, next := s.h.g.ObserveStep(st, s.view, s.sig, s.chars)
	s.h.save(s.call.Conversation, st, next)
	s.h.record(s.call, events)
}
