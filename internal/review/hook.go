package review

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// optOutHeader, set to "off" by a client, keeps its requests out of the
// masked review.
const optOutHeader = "X-Shaper-Review"

// maxChildBody bounds the review child's answer the proxy reads.
const maxChildBody = 4 << 20

// Reviewer is the finisher that runs the masked review when a turn is
// about to end (BuildChild, ParsePacket and the mergers do the work). It
// sends its child and continuation through the call (proxy.Call.Do), so
// they are captured as internal calls, and writes its record with
// proxy.Call.Annotate.
type Reviewer struct {
	cfg      Config
	ledger   *ledger.Store
	profiles *profile.Table
	log      *slog.Logger
	seen     *boundedSet
	m        *reviewMetrics
}

var _ proxy.Finisher = (*Reviewer)(nil)

// NewReviewer returns the finisher for c (valid); st keeps the reviewed
// turns and the insertions across restarts; profiles say, per route and
// model, where the notice goes and which tool_choice the child sends (nil:
// the built-ins, routes resolved by name).
func NewReviewer(c Config, st *ledger.Store, profiles *profile.Table, log *slog.Logger) *Reviewer {
	if profiles == nil {
		profiles = profile.NewTable(nil, nil)
	}
	return &Reviewer{cfg: c, ledger: st, profiles: profiles, log: log, seen: newBoundedSet(4096), m: newReviewMetrics()}
}

// Collectors are the review's metrics.
func (rv *Reviewer) Collectors() []prometheus.Collector { return rv.m.collectors() }

type reviewMetrics struct {
	outcomes *prometheus.CounterVec
	skipped  *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	ratio    prometheus.Histogram
}

func newReviewMetrics() *reviewMetrics {
	return &reviewMetrics{
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_review_total", Help: "Masked reviews by outcome: attempted, published, no_update, invalid, timeout, error, observed.",
		}, []string{"outcome"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_review_skipped_total", Help: "Turn-stopping events not reviewed, by reason.",
		}, []string{"reason"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "shaperproxy_review_added_seconds", Help: "Turn-end latency the review added, by phase (child, continuation).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 16),
		}, []string{"phase"}),
		ratio: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "shaperproxy_review_child_prompt_ratio", Help: "The review child's prompt bytes over the primary's.",
			Buckets: []float64{0.25, 0.5, 0.75, 0.9, 1, 1.1, 1.25, 1.5, 2},
		}),
	}
}

func (m *reviewMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.outcomes, m.skipped, m.latency, m.ratio}
}

// Start returns a session for every response of a reviewed route; the
// session decides at the end whether this was a turn-stopping event.
func (rv *Reviewer) Start(call *proxy.Call, info *proxy.ResponseInfo) proxy.FinishSession {
	if !rv.cfg.Reviews(call.Route) || call.View == nil || call.Conversation == "" {
		return nil
	}
	if strings.EqualFold(call.Header.Get(optOutHeader), "off") {
		rv.m.skipped.WithLabelValues("opt_out").Inc()
		return nil
	}
	return &reviewSession{rv: rv, call: call, view: call.View, asm: conv.NewBoundedAssembler(maxDraftData),
		prof: rv.profiles.ForRoute(call.Route, call.Model)}
}

// reviewSession follows one response.
type reviewSession struct {
	rv      *Reviewer
	prof    profile.Profile // where the notice goes, the child's tool_choice
	call    *proxy.Call
	view    *conv.Request
	asm     *conv.Assembler
	first   []byte // the draft's first chunk
	holding bool
}

// maxDraftData bounds the stream data a review session assembles: a
// response longer than this is not reviewed (its snapshot would be over
// any sensible max_snapshot_chars anyway), and memory stays bounded.
const maxDraftData = 32 << 20

// Hold assembles the draft and holds from the first event that carries a
// finish_reason (the finish chunk, a usage chunk after it, [DONE]).
func (s *reviewSession) Hold(ev *sse.Event) bool {
	if ev.HasData && !ev.IsDone() {
		if s.first == nil {
			s.first = bytes.Clone(ev.Data)
		}
		_ = s.asm.AddChunk(ev.Data) // past maxDraftData the draft is not reviewed
	}
	if s.holding {
		return true
	}
	s.holding = ev.IsDone() || conv.Finishes(ev.Data)
	return s.holding
}

// End runs the review of a streamed turn end.
func (s *reviewSession) End(ctx context.Context, held [][]byte, out *proxy.EventWriter) error {
	draft, ok := s.stopping()
	if !ok {
		return nil
	}
	stop := out.KeepAlive(s.rv.cfg.KeepAlive, "shaperproxy: masked review in progress")
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, s.rv.cfg.Timeout)
	defer cancel()
	packet, publish := s.ask(ctx, draft)
	if !publish {
		return nil
	}
	return s.continueStream(ctx, draft, packet, held, out)
}

// EndBody runs the review of a non-streamed turn end.
func (s *reviewSession) EndBody(ctx context.Context, body []byte, keepAlive proxy.KeepAlive) ([]byte, error) {
	if err := s.asm.AddBody(body); err != nil {
		return body, nil
	}
	draft, ok := s.stopping()
	if !ok {
		return body, nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.rv.cfg.Timeout)
	defer cancel()
	stop := keepAlive(s.rv.cfg.KeepAlive)
	defer stop()
	packet, publish := s.ask(ctx, draft)
	if !publish {
		return body, nil
	}
	return s.continueBody(ctx, draft, packet, body)
}

// stopping reports whether the response ends the turn (one choice,
// finish_reason stop, no tool calls), whether the turn is in scope and not
// reviewed yet, and marks it reviewed.
func (s *reviewSession) stopping() (Draft, bool) {
	if s.asm.Over() {
		s.rv.m.skipped.WithLabelValues("oversize").Inc()
		return Draft{}, false
	}
	resp := s.asm.Response()
	if len(resp.Choices) != 1 || resp.Choices[0].FinishReason != "stop" || len(resp.Choices[0].ToolCalls) > 0 {
		return Draft{}, false
	}
	rv := s.rv
	if resp.Choices[0].HasSignedReasoning || signedHistory(s.view) {
		// A revision would rewrite or drop signed reasoning (PROTOCOLS.md rule 2).
		rv.m.skipped.WithLabelValues("signed_reasoning").Inc()
		return Draft{}, false
	}
	if rv.cfg.Scope == ScopeToolTurns && !turnHasToolCall(s.view) {
		rv.m.skipped.WithLabelValues("no_tool_in_turn").Inc()
		return Draft{}, false
	}
	key := TurnKey(s.view, s.call.Conversation)
	if key == "" || !rv.seen.add(key) {
		rv.m.skipped.WithLabelValues("already_reviewed").Inc()
		return Draft{}, false
	}
	first, err := rv.ledger.MarkReviewed(s.call.Conversation, key)
	if err != nil || !first {
		rv.m.skipped.WithLabelValues("already_reviewed").Inc()
		return Draft{}, false
	}
	return DraftOf(resp.Choices[0]), true
}

// signedHistory reports whether any message carries signed reasoning.
func signedHistory(v *conv.Request) bool {
	for _, m := range v.Messages {
		if m.Signed {
			return true
		}
	}
	return false
}

// turnHasToolCall reports whether the open turn made a tool call.
func turnHasToolCall(v *conv.Request) bool {
	t, ok := v.OpenTurn()
	if !ok {
		return false
	}
	for _, st := range t.Steps {
		if len(v.Messages[st.Assistant].ToolCalls) > 0 {
			return true
		}
	}
	return false
}

// reviewNote is the capture record of one review.
type reviewNote struct {
	Review    string          `json:"review"` // the outcome
	Turn      string          `json:"turn"`
	Child     string          `json:"child_call,omitempty"`
	Published bool            `json:"published"`
	Packet    json.RawMessage `json:"packet,omitempty"`
	Err       string          `json:"err,omitempty"`
	ChildMS   int64           `json:"child_ms"`
	Stats     any             `json:"stats,omitempty"`
}

// ask runs the child and decides, by the policy, whether to publish.
func (s *reviewSession) ask(ctx context.Context, draft Draft) (Packet, bool) {
	rv := s.rv
	note := reviewNote{Turn: TurnKey(s.view, s.call.Conversation)}
	defer func() { rv.note(s.call, note) }()
	child, err := buildChild(s.view, draft, childOptions{
		Mask: rv.cfg.Mask, ResponseFormat: rv.cfg.ResponseFormat, Model: rv.cfg.Model,
		MaxSnapshotChars: rv.cfg.MaxSnapshotChars, MaxImages: rv.cfg.MaxImages,
		KeepTools: true, ToolChoice: s.prof.ChildToolChoice,
	})
	if reason, skipped := skipReason(err); skipped {
		rv.m.skipped.WithLabelValues(reason).Inc()
		note.Review = "skipped: " + reason
		return Packet{}, false
	} else if err != nil {
		return s.failed(&note, "error", err)
	}
	rv.m.outcomes.WithLabelValues("attempted").Inc()
	rv.m.ratio.Observe(float64(len(child.Body)) / float64(max(len(s.view.Body), 1)))
	note.Stats = child.Stats
	start := time.Now()
	body, childID, err := rv.send(ctx, s.call, "review-child", child.Body)
	note.Child, note.ChildMS = childID, time.Since(start).Milliseconds()
	rv.m.latency.WithLabelValues("child").Observe(time.Since(start).Seconds())
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return s.failed(&note, "timeout", err)
		}
		return s.failed(&note, "error", err)
	}
	packet, err := parsePacket(body)
	if err != nil {
		return s.failed(&note, "invalid", err)
	}
	note.Packet = packetJSON(packet)
	note.Review = packet.Status
	rv.m.outcomes.WithLabelValues(packet.Status).Inc()
	if rv.cfg.Policy == PolicyObserveOnly {
		rv.m.outcomes.WithLabelValues("observed").Inc()
	}
	note.Published = rv.cfg.Policy.Publishes(packet)
	return packet, note.Published
}

// packetJSON is the packet in its wire form, for the capture log.
func packetJSON(p Packet) json.RawMessage {
	b, _ := json.Marshal(p)
	return b
}

func (s *reviewSession) failed(note *reviewNote, outcome string, err error) (Packet, bool) {
	s.rv.m.outcomes.WithLabelValues(outcome).Inc()
	note.Review, note.Err = outcome, err.Error()
	s.rv.log.Warn("masked review found nothing to publish", "call", s.call.ID, "outcome", outcome, "err", err)
	return Packet{}, false
}

// send makes one of the review's requests through the proxy (captured
// as internal, for purpose) and returns its body and its call id.
func (rv *Reviewer) send(ctx context.Context, call *proxy.Call, purpose string, body []byte) ([]byte, string, error) {
	out, child, err := call.DoRead(ctx, purpose, body, maxChildBody)
	id := ""
	if child != nil {
		id = child.ID
	}
	return out, id, err
}

// continueStream asks the model to revise and streams the continuation
// after the draft, as one message. If the continuation fails before its
// first event, the held draft end goes out as it came (End wrote
// nothing); after it, the error makes the proxy cut the client's stream:
// a revision cut short is not closed as if it were whole. What is
// assembled of the continuation (to record it) is bounded by
// maxDraftData; a longer one still streams, and is not recorded.
func (s *reviewSession) continueStream(ctx context.Context, draft Draft, p Packet, held [][]byte, out *proxy.EventWriter) error {
	shown, notice := placeNotice(draft, p, s.prof.ReviewNotice(), TurnKey(s.view, s.call.Conversation))
	body, err := continuationRequest(s.view.Body, shown, notice)
	if err != nil {
		return err
	}
	start := time.Now()
	defer func() { s.rv.m.latency.WithLabelValues("continuation").Observe(time.Since(start).Seconds()) }()
	resp, _, err := s.call.Do(ctx, "review-continuation", body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("continuation: upstream answered %d", resp.StatusCode)
	}
	merger, err := newStreamMerger(s.first, draft)
	if err != nil {
		return err
	}
	merger.DraftUsage = s.asm.Response().Usage
	cont := conv.NewBoundedAssembler(maxDraftData)
	rd := sse.NewReader(resp.Body)
	text := splitFinish(held[0])
	wrote := false
	for {
		ev, rerr := rd.Next()
		if ev.Truncated { // the client must not get half an event: give up as if cut
			rerr = errEventTooLarge
		} else if ev.HasData && !ev.IsDone() {
			_ = cont.AddChunk(ev.Data)
		}
		if len(ev.Raw) > 0 && !ev.Partial && !ev.Truncated {
			b, merr := merger.Next(ev.Raw)
			if merr == nil && len(b) > 0 {
				if !wrote && text != nil && out.Write(text) != nil { // the draft's last piece first
					return ctx.Err()
				}
				if out.Write(b) != nil {
					return ctx.Err()
				}
				wrote = true
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) || rd.Truncated() {
				return fmt.Errorf("continuation cut: %w", rerr)
			}
			break
		}
	}
	s.rv.m.outcomes.WithLabelValues("published").Inc()
	// The revision went out whole: what follows is no reason to cut it.
	switch {
	case cont.Over():
		s.rv.log.Warn("the revision was too long to record; later requests carry it as the client sends it", "call", s.call.ID)
	default:
		if err := s.record(shown, notice, cont, body); err != nil {
			s.rv.log.Warn("the revision went out but was not recorded", "call", s.call.ID, "err", err)
		}
	}
	return nil
}

// errEventTooLarge ends a continuation whose event is longer than the
// proxy keeps.
var errEventTooLarge = errors.New("continuation event over the size limit")

// continueBody is continueStream for a non-streamed turn end.
func (s *reviewSession) continueBody(ctx context.Context, draft Draft, p Packet, draftBody []byte) ([]byte, error) {
	shown, notice := placeNotice(draft, p, s.prof.ReviewNotice(), TurnKey(s.view, s.call.Conversation))
	body, err := continuationRequest(s.view.Body, shown, notice)
	if err != nil {
		return draftBody, err
	}
	start := time.Now()
	contBody, _, err := s.rv.send(ctx, s.call, "review-continuation", body)
	s.rv.m.latency.WithLabelValues("continuation").Observe(time.Since(start).Seconds())
	if err != nil {
		return draftBody, err
	}
	merged, err := mergeBodies(draftBody, contBody)
	if err != nil {
		return draftBody, err
	}
	cont := conv.NewAssembler()
	if err := cont.AddBody(contBody); err != nil {
		return draftBody, err
	}
	s.rv.m.outcomes.WithLabelValues("published").Inc()
	return merged, s.record(shown, notice, cont, body)
}

// record keeps the insertion so later requests get the real history back.
// A user notice opens a turn of its own in the history (conv's turns), so
// that turn, as the continuation request contRequest holds it, is marked
// reviewed too: the continuation is the review's answer, not a turn to
// review again.
func (s *reviewSession) record(draft Draft, notice []byte, cont *conv.Assembler, contRequest []byte) error {
	resp := cont.Response()
	if len(resp.Choices) == 0 {
		return errors.New("continuation had no choice")
	}
	ins := NewInsertion(draft, notice, DraftOf(resp.Choices[0]))
	if err := s.rv.ledger.PutInsertion(s.call.Conversation, ledger.Insertion(ins)); err != nil {
		return err
	}
	if gjson.GetBytes(notice, "role").Str != conv.RoleUser {
		return nil
	}
	v, err := conv.ParseRequest(contRequest)
	if err != nil {
		return err
	}
	key := TurnKey(v, s.call.Conversation)
	s.rv.seen.add(key)
	_, err = s.rv.ledger.MarkReviewed(s.call.Conversation, key)
	return err
}

// note writes the review's record to the capture log.
func (rv *Reviewer) note(call *proxy.Call, n reviewNote) {
	data, _ := json.Marshal(n)
	call.Annotate("review", data)
}

// boundedSet remembers up to n keys, forgetting the oldest first.
type boundedSet struct {
	mu   sync.Mutex
	keys map[string]struct{}
	ring []string
	next int
}

func newBoundedSet(n int) *boundedSet {
	return &boundedSet{keys: make(map[string]struct{}, n), ring: make([]string, n)}
}

// add reports whether key was new.
func (b *boundedSet) add(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.keys[key]; ok {
		return false
	}
	if old := b.ring[b.next]; old != "" {
		delete(b.keys, old)
	}
	b.ring[b.next], b.keys[key] = key, struct{}{}
	b.next = (b.next + 1) % len(b.ring)
	return true
}
