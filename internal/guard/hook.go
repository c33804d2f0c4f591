package guard

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
)

// guardBucket holds each conversation's guard State in the ledger.
const guardBucket = "guard"

// maxProjections bounds the conversations whose fold is kept in memory;
// a conversation past it is folded again from the start (same result).
const maxProjections = 1024

// verdictKey carries a request's signals to its response and its
// decision to a retry of the same request.
var verdictKey = proxy.NewKey[*verdict]()

// verdict is what the guard found and decided for one request.
type verdict struct {
	sig signals
	dec decision
}

// Hook is the ECHO/STALL guard on the wire: a request transform that
// places notices and lowers the effort, and an observer that measures
// STALL on responses. State lives in the ledger, so acknowledgements
// survive restarts: read once per conversation (then kept with its fold),
// written in the background when it changes (ledger.Store.PutLater), so
// no request waits for the disk; events go to the capture log through
// proxy.Call.Annotate.
type Hook struct {
	g         *Guard
	ledger    *ledger.Store
	upstreams map[string]string
	log       *slog.Logger
	events    *prometheus.CounterVec

	mu    sync.Mutex
	projs map[string]*convProjection
}

type convProjection struct {
	mu     sync.Mutex
	p      *projection
	st     state // the conversation's state, once loaded
	loaded bool
}

var (
	_ proxy.RequestTransform = (*Hook)(nil)
	_ proxy.Observer         = (*Hook)(nil)
)

// NewHook returns the hook for g; upstreams maps route names to their
// upstream URLs (for the effort step-down mappings).
func NewHook(g *Guard, st *ledger.Store, upstreams map[string]string, log *slog.Logger) *Hook {
	return &Hook{
		g: g, ledger: st, upstreams: upstreams, log: log, projs: map[string]*convProjection{},
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_guard_events_total", Help: "Guard signals, by kind (echo_notice, stall_observed, stall_interrupted).",
		}, []string{"kind"}),
	}
}

// Collectors are the guard's metrics.
func (h *Hook) Collectors() []prometheus.Collector { return []prometheus.Collector{h.events} }

// projection returns the conversation's fold, making one if needed.
func (h *Hook) projection(conversation string) *convProjection {
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

// state returns the conversation's state: from memory after the first
// time, read from the ledger then. cp.mu is held.
func (h *Hook) state(cp *convProjection, conversation string) state {
	if cp.loaded {
		return cp.st
	}
	var st state
	if b, ok, err := h.ledger.Get(guardBucket, conversation, "state"); err == nil && ok {
		if err := st.UnmarshalBinary(b); err != nil {
			h.log.Warn("guard state unreadable; starting afresh", "err", err)
			st = state{}
		}
	}
	cp.st, cp.loaded = st, true
	return st
}

// save keeps the conversation's next state and, when it changed, queues
// it for the ledger. cp.mu is held.
func (h *Hook) save(cp *convProjection, conversation string, before, after state) {
	cp.st, cp.loaded = after, true
	if after.equal(before) {
		return
	}
	a, err := after.MarshalBinary()
	if err == nil {
		err = h.ledger.PutLater(guardBucket, conversation, "state", a)
	}
	if err != nil {
		h.log.Warn("guard state not saved", "err", err)
	}
}

// TransformRequest folds the request's new messages, decides, and places
// the notices and the effort step-down.
func (h *Hook) TransformRequest(_ context.Context, call *proxy.Call, body []byte) ([]byte, error) {
	if call.Internal || call.Conversation == "" {
		return body, nil
	}
	if call.Retry { // the same request again: the same decision, not a second one
		if v, ok := verdictKey.Get(call); ok {
			return h.apply(call, body, v.dec), nil
		}
		return body, nil
	}
	// One conversation's fold and state are read, decided and saved under
	// its lock, so overlapping requests of a conversation lose nothing.
	cp := h.projection(call.Conversation)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	sig, _ := cp.p.Update(call.View)
	st := h.state(cp, call.Conversation)
	dec, next := h.g.Decide(st, call.View, sig)
	verdictKey.Set(call, &verdict{sig: sig, dec: dec})
	out := h.apply(call, body, dec)
	h.save(cp, call.Conversation, st, next)
	h.record(call, dec.Events)
	return out, nil
}

// apply places the decision's notices and lowers the effort. The view of
// the result is derived from the call's (proxy.Call.SetView): a notice
// placed again in every request of a long conversation does not make the
// proxy parse each of them twice.
func (h *Hook) apply(call *proxy.Call, body []byte, dec decision) []byte {
	out, view := body, (*conv.Request)(nil) // view: of out, when derived
	if len(dec.Placements) > 0 {
		edits, err := placementEdits(call.View, dec.Placements)
		if err == nil {
			view, err = call.View.Apply(edits)
		}
		if err != nil {
			h.log.Warn("guard notice not placed", "call", call.ID, "err", err)
			view = nil
		} else {
			out = view.Body
		}
	}
	if dec.StepDown {
		stepped, changed := stepDown(out, h.g.Lowering(call.Route, h.upstreams[call.Route]), true)
		if changed && view != nil {
			pre, suf := commonEnds(out, stepped)
			view, _ = view.Apply([]conv.Edit{{Start: pre, End: len(out) - suf, Repl: stepped[pre : len(stepped)-suf]}})
		}
		out = stepped
	}
	if view != nil && len(view.Body) == len(out) && bytes.Equal(view.Body, out) {
		out = view.Body
		call.SetView(view)
	}
	return out
}

// record counts the events and writes them to the capture log (counts and
// effort only, never reasoning or tool output).
func (h *Hook) record(call *proxy.Call, events []event) {
	for _, e := range events {
		h.events.WithLabelValues(e.Kind.String()).Inc()
		data, _ := json.Marshal(struct {
			Guard  string `json:"guard"`
			Tool   string `json:"tool,omitempty"`
			Count  int    `json:"count,omitempty"`
			Stall  stall  `json:"stall"`
			Effort string `json:"effort,omitempty"`
		}{e.Kind.String(), e.Tool, e.Count, e.Stall, e.Effort})
		call.Annotate("guard", data)
	}
}

// Request returns a sink that measures STALL on the response of a chat
// request the client made.
func (h *Hook) Request(call *proxy.Call, _ *proxy.Upstream) proxy.ResponseSink {
	v, ok := verdictKey.Get(call)
	if !ok || call.Internal || call.Retry {
		return nil
	}
	return &guardSink{h: h, call: call, sig: v.sig, view: call.View}
}

// guardSink counts the reasoning characters of a response as it passes;
// it keeps no text (a stream can be gigabytes long).
type guardSink struct {
	h     *Hook
	call  *proxy.Call
	view  *conv.Request
	sig   signals
	chars int
	body  []byte // a non-stream body, whole at End
	buf   []byte // scratch for reasoningRunes
}

func (s *guardSink) Response(*proxy.ResponseInfo) {}

func (s *guardSink) Event(ev *sse.Event, _ int, _ time.Duration) {
	if !ev.HasData || !conv.MentionsReasoning(ev.Data) {
		return
	}
	n, buf := reasoningRunes(ev.Data, s.buf)
	s.chars, s.buf = s.chars+n, buf
}

func (s *guardSink) Body(p []byte) {
	if len(s.body) < maxGuardBody {
		s.body = append(s.body, p...)
	}
}

// bodyChars is stepChars of a non-stream body's first choice; false when
// the body is not JSON or has no choice. a is what the proxy read of the
// body for every sink (proxy.End.Answer), nil when it read none (the
// body is then read here). The usual body (one choice, a message with
// string content) is read where it lies; any other goes through the
// assembler, which says what the first choice is.
func bodyChars(body []byte, a *conv.Answer) (int, bool) {
	if !conv.ValidJSON(body) {
		return 0, false
	}
	if a == nil {
		read := conv.ReadAnswer(body)
		a = &read
	}
	if c, ok := a.Choice(); ok {
		return stepChars(c), true
	}
	asm := conv.NewAssembler()
	if asm.AddBody(body) != nil {
		return 0, false
	}
	all := asm.Response().Choices
	if len(all) == 0 {
		return 0, false
	}
	return stepChars(all[0]), true
}

// maxGuardBody bounds the non-stream body the guard keeps to measure.
const maxGuardBody = 16 << 20

func (s *guardSink) End(end proxy.End) {
	if end.Outcome != proxy.OutcomeComplete {
		return
	}
	if s.body != nil {
		n, ok := bodyChars(s.body, end.Answer)
		if !ok {
			return
		}
		s.chars = n
	}
	cp := s.h.projection(s.call.Conversation)
	cp.mu.Lock()
	defer cp.mu.Unlock()
	st := s.h.state(cp, s.call.Conversation)
	events, next := s.h.g.ObserveStep(st, s.view, s.sig, s.chars)
	s.h.save(cp, s.call.Conversation, st, next)
	s.h.record(s.call, events)
}
