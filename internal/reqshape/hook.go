package reqshape

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
	"github.com/shaperproxy/shaperproxy/originals"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/shaping"
)

// Shaper is the request transform that shapes reasoning in outgoing
// history, records the originals, clears them at each new turn, and backs
// off (the breaker) when an upstream rejects a shaped request. Close it
// before its Options.State.
type Shaper struct {
	enabled   bool
	rules     rules
	store     *originals.Writer // nil: no side table
	profiles  *profile.Table
	history   *tracker
	memo      *memo
	carries   *carries
	breaker   *breaker
	log       *slog.Logger
	blocks    *prometheus.CounterVec
	decisions *prometheus.CounterVec
	trips     *prometheus.CounterVec

	counters *resolved.Cache[string, *routeCounters]      // by route
	profs    *resolved.Cache[[2]string, *profile.Profile] // by route and model
}

// memoEntries bounds the shaped texts remembered across requests: enough
// for the histories of a few dozen concurrent agents (a 631-message
// history holds ~200 reasoning blocks).
const memoEntries = 16384

var (
	_ proxy.RequestTransform = (*Shaper)(nil)
	_ proxy.Retrier          = (*Shaper)(nil)
)

// Options are what a Shaper uses besides its configuration. Every field
// may be left zero.
type Options struct {
	// Originals receives the originals of shaped blocks (nil: none).
	Originals *originals.Writer
	// Profiles resolves each request's rendering profile (nil: a table
	// of the built-ins that knows no route, so a route resolves by its
	// name as a host and by the model).
	Profiles *profile.Table
	// State keeps the blocks shaped at a cache break across restarts
	// (*ledger.Store; nil: in memory only).
	State KV
	// Log receives the breaker's warnings (nil discards).
	Log *slog.Logger
}

// NewShaper returns the transform for c (valid).
func NewShaper(c Config, o Options) *Shaper {
	if o.Profiles == nil {
		o.Profiles = profile.NewTable(nil, nil)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Shaper{
		enabled: c.Enabled, rules: c.RuleSet(), store: o.Originals, profiles: o.Profiles, log: o.Log,
		history: newTracker(o.State, historyConversations),
		breaker: newBreaker(c.Breaker), memo: newMemo(memoEntries), carries: newCarries(maxCarried),
		counters: resolved.New[string, *routeCounters](maxCounters), profs: resolved.New[[2]string, *profile.Profile](maxCounters),
		blocks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_reasoning_blocks_total", Help: "Reasoning blocks in outgoing requests, by route and state (shaped or raw).",
		}, []string{"route", "state"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_shaping_decisions_total", Help: "Reasoning blocks in outgoing requests by route and why they went out as they did: free (not rendered), pays, break, batched (shaped); kept, frozen, same, old (keep-recent policy).",
		}, []string{"route", "reason"}),
		trips: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_shaping_breaker_trips_total", Help: "Shaped requests the upstream rejected; each was retried unshaped and paused shaping on its route.",
		}, []string{"route"}),
	}
}

// Collectors are the transform's metrics.
func (s *Shaper) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.blocks, s.decisions, s.trips}
}

// Close stops recording the blocks shaped at cache breaks in Options.State
// (whose own Close writes what it still holds): close the Shaper before
// it.
func (s *Shaper) Close() error { return s.history.Close() }

// TransformRequest clears the conversation's earlier turns when the
// request starts a new one (whether shaping is on or not), then shapes.
//
// A request with no assistant message (a conversation's first) has no
// reasoning to shape: it goes out as it came, and what the shaper does
// for it that its conversation's next request reads (the originals' new
// turn, the prints that request finds a cache break against) is done
// beside the trip upstream, by the same code, before the answer is read.
//
// What only saves the next request work, or is only counted or stored
// (book: the carry, the blocks' counts, their originals), waits until the
// client has the answer (Call.After): neither the request nor its answer
// waits for it, nor does it take a processor from the trip.
func (s *Shaper) TransformRequest(_ context.Context, call *proxy.Call, body []byte) ([]byte, error) {
	r := requestOf(call)
	call.Reasoning = proxy.ReasoningCount{}
	if !hasAssistant(r.view) {
		if len(r.view.Messages) < minCarried { // no blocks, no carry (inputs): nothing to book after the answer
			call.Beside(func() {
				if _, b := s.shapeRequest(r); b != nil {
					s.book(*b)
				}
			})
			return body, nil
		}
		var b *booking
		call.Beside(func() { _, b = s.shapeRequest(r) })
		call.After(func() { // the beside work ran before the answer was read (or not at all: a failed transform)
			if b != nil {
				s.book(*b)
			}
		})
		return body, nil
	}
	res, b := s.shapeRequest(r)
	call.Reasoning = proxy.ReasoningCount{Shaped: res.Shaped, Raw: res.Raw}
	if res.Applied != nil {
		call.SetViewLater(res.Applied) // made beside the trip, off the request's hold
	}
	if b != nil {
		// The blocks are counted, their originals queued and the carry
		// for the conversation's next request made once the client has
		// the answer (Call.After): the request waits for none of it.
		// The blocks' strings are the body's and the memo's, both kept
		// past the call's transforms, and the carry is made of the
		// call's view, held until its end. A next request that comes
		// before the carry is made takes the one before, or none: a
		// carry only saves work (TestCarryChangesNothing); originals
		// queued after the next turn began are of an earlier turn, which
		// the table ignores (originals.Store.Put).
		call.After(func() { s.book(*b) })
	}
	return res.Body, nil
}

// request is what the shaper reads of a call, taken when the call's
// transforms run (the work beside the trip reads it later).
type request struct {
	view                       *conv.Request
	route, model, conversation string
	retry                      bool
}

func requestOf(call *proxy.Call) request {
	return request{view: call.View, route: call.Route, model: call.Model, conversation: call.Conversation, retry: call.Retry}
}

// hasAssistant reports whether req has an assistant message, the only
// kind that carries reasoning. A conversation's history has its first
// within a few messages of the start: the loop ends there.
func hasAssistant(req *conv.Request) bool {
	for i := range req.Messages {
		if req.Messages[i].Role == conv.RoleAssistant {
			return true
		}
	}
	return false
}

// shapeRequest begins the turn in the originals table when the request
// starts one, shapes it and records its prints; it returns what the
// request leaves to do once its answer is the client's (book; nil:
// nothing).
func (s *Shaper) shapeRequest(r request) (result, *booking) {
	view := r.view
	turn, starts := view.TurnCount()
	if s.store != nil && starts && !r.retry {
		s.store.BeginTurn(r.conversation, turn)
	}
	rule, ok := s.rules.Match(r.route, r.model)
	if !s.enabled || !ok || r.retry || s.breaker.paused(r.route) {
		return s.unshaped(r, turn)
	}
	in := s.inputs(r, rule)
	res := shapeLater(view, rule, s.memo, in)
	in.from.release()
	if in.track {
		s.history.record(r.conversation, in.batched, res.Prints, res.Batched)
	}
	if len(res.Blocks) == 0 && res.Later == nil {
		putBlocks(res.Blocks)
		return res, nil
	}
	b := &booking{route: r.route, conversation: r.conversation, turn: turn, open: -1, shaped: res.Shaped, raw: res.Raw, blocks: res.Blocks, later: res.Later}
	if res.Shaped > 0 && s.store != nil {
		b.open, _ = view.OpenTurnStart()
	}
	return res, b
}

// unshaped is shapeRequest for a request that goes out as it came
// (shaping off, no rule for its route and model, a retry, the breaker
// paused): its blocks are counted, each with the reason keep-recent
// gives a block that keeping does not change (same; frozen on a frozen
// profile), and nothing is decided, carried or stored. Deciding each
// block under keep-recent gave the same counts at several times the
// cost (TestUnshapedCounts, BenchmarkSeedHold's "off").
func (s *Shaper) unshaped(r request, turn int) (result, *booking) {
	view := r.view
	res := result{Body: view.Body, View: view, Break: -1}
	for i := range view.Messages {
		if m := &view.Messages[i]; m.Role == conv.RoleAssistant && hasReasoning(m) {
			res.Raw++
		}
	}
	if res.Raw == 0 {
		return res, nil
	}
	reason := reasonSame
	if s.profile(r.route, r.model).Frozen {
		reason = reasonFrozen
	}
	return res, &booking{route: r.route, conversation: r.conversation, turn: turn, open: -1, raw: res.Raw, passed: reason}
}

// booking is what a request leaves to do once it has gone upstream: make
// the carry (later; nil: none), count its blocks, queue the originals of
// those shaped in the open turn (from its start, open; -1: none to
// queue).
type booking struct {
	route, conversation string
	turn, open          int
	shaped, raw         int
	blocks              []block
	later               *carrying
	// passed is, for a request that went out as it came (unshaped), the
	// reason of each of its raw blocks, which has no blocks listed.
	passed string
}

// book counts b's blocks, queues their originals and makes its carry,
// then gives the blocks back. The blocks taken as decided are read where
// they are, in the carry they were taken from: each is counted by its
// reason, and only those to queue are made whole (settledBlock).
func (s *Shaper) book(b booking) {
	pre := b.later.settledCands()
	s.count(b.route, b.shaped, b.raw, pre, b.blocks, b.passed)
	if b.open >= 0 {
		if es := entries(b.later.request(), pre, b.blocks, b.shaped, b.open, b.conversation, b.turn); len(es) > 0 {
			s.store.Put(es)
		}
	}
	if b.later != nil {
		s.carries.put(b.conversation, b.later.carry())
	}
	putBlocks(b.blocks) // counted and stored: nothing reads them after
}

// inputs resolves the profile (keep-recent reads only whether it is
// frozen), the carry of one of the conversation's last two requests (the
// one whose view the request was read against, else the last; held:
// release it) and, under the cache-aware policy, the conversation's
// history.
func (s *Shaper) inputs(r request, rule shapeRule) inputs {
	in := inputs{prof: s.profile(r.route, r.model)}
	if rule.Shaping.Op != shaping.OpKeep && r.conversation != "" && len(r.view.Messages) >= minCarried {
		_, base, _ := r.view.Lineage()
		in.from, in.carry = s.carries.get(r.conversation, base), true
	}
	if rule.Policy == PolicyCacheAware && r.conversation != "" {
		in.prev, in.batched = s.history.state(r.conversation)
		in.track = true
	}
	return in
}

// profile returns the profile of a route and model, resolved once (the
// table matches glob patterns and parses the upstream's URL each time).
// The profile is shared: it is only read.
func (s *Shaper) profile(route, model string) *profile.Profile {
	return s.profs.Get([2]string{route, model}, func() *profile.Profile { // models come from clients: bounded
		v := s.profiles.ForRoute(route, model)
		return &v
	})
}

// count records the request's blocks in the metrics: one addition per
// reason, not per block (a long history has hundreds), to counters looked
// up once a request. pre are the blocks taken as decided, blocks the
// others; passed, when not "", is the reason of every raw block of a
// request that went out as it came (booking.passed).
func (s *Shaper) count(route string, shaped, raw int, pre []cand, blocks []block, passed string) {
	if shaped == 0 && raw == 0 {
		return // most requests carry no reasoning: no counter looked up
	}
	rc := s.counters.Get(route, func() *routeCounters { return &routeCounters{} })
	if shaped > 0 {
		rc.get(&rc.shaped, s.blocks, route, "shaped").Add(float64(shaped))
	}
	if raw > 0 {
		rc.get(&rc.raw, s.blocks, route, "raw").Add(float64(raw))
	}
	n, other := reasonCounts(pre, blocks)
	if passed != "" {
		n[slices.Index(blockReasons[:], passed)] += raw
	}
	for _, reason := range other {
		s.decisions.WithLabelValues(route, reason).Inc()
	}
	for i, k := range n {
		if k > 0 {
			rc.get(&rc.reasons[i], s.decisions, route, blockReasons[i]).Add(float64(k))
		}
	}
}

// reasonCounts counts the blocks taken as decided (pre) and the others
// by reason, in blockReasons' order; other has the reasons not there, a
// block's each.
func reasonCounts(pre []cand, blocks []block) (n [len(blockReasons)]int, other []string) {
	tally := func(reason string) {
		if i := slices.Index(blockReasons[:], reason); i >= 0 {
			n[i]++
		} else {
			other = append(other, reason)
		}
	}
	for i := range pre {
		tally(pre[i].Reason)
	}
	for i := range blocks {
		tally(blocks[i].Reason)
	}
	return n, other
}

// blockReasons are the values of block.Reason.
var blockReasons = [...]string{reasonKept, reasonSame, reasonFrozen, reasonOld, reasonFree, reasonPays, reasonBreak, reasonBatched}

// routeCounters are a route's counters of blocks, each made on its first
// use (a series appears once it counts something), kept after it: a
// lookup in a vector hashes the labels under its lock.
type routeCounters struct {
	shaped, raw atomic.Pointer[prometheus.Counter]
	reasons     [len(blockReasons)]atomic.Pointer[prometheus.Counter]
}

// get returns the counter at *at, the child of vec for labels a and b
// (made once; two requests that make it at once get the same child).
func (rc *routeCounters) get(at *atomic.Pointer[prometheus.Counter], vec *prometheus.CounterVec, a, b string) prometheus.Counter {
	if c := at.Load(); c != nil {
		return *c
	}
	c := vec.WithLabelValues(a, b)
	at.Store(&c)
	return c
}

// maxCounters bounds the routes whose counters are kept, and the route
// and model pairs whose profiles are (routes are few; a forgotten one is
// looked up again).
const maxCounters = 1024

// entries are the originals to keep: the blocks shaped in the open turn,
// of those req took as decided (pre) and the others (blocks). Blocks of
// earlier turns were recorded in their own turn and cleared when this one
// began; recording them again would make the table hold the whole
// history instead of one turn.
func entries(req *conv.Request, pre []cand, blocks []block, shaped, openStart int, conversation string, turn int) []originals.Entry {
	out := make([]originals.Entry, 0, shaped) // shaped: the changed blocks, the most there are
	for i := range pre {
		if c := &pre[i]; c.Changed && c.Message >= openStart {
			b := settledBlock(req, c)
			out = append(out, originals.Entry{Shaped: b.Shaped, Original: b.Original, Conversation: conversation, Turn: turn})
		}
	}
	for _, b := range blocks {
		if b.Changed && b.Message >= openStart {
			out = append(out, originals.Entry{Shaped: b.Shaped, Original: b.Original, Conversation: conversation, Turn: turn})
		}
	}
	return out
}

// RetryWithout trips the breaker when the upstream's answer concerns the
// request body: a 4xx that mentions reasoning, or any 400 when configured.
func (s *Shaper) RetryWithout(call *proxy.Call, status int, errBody []byte) bool {
	if !s.breaker.rejects(status, errBody) {
		return false
	}
	s.breaker.trip(call.Route)
	s.trips.WithLabelValues(call.Route).Inc()
	s.log.Warn("upstream rejected a shaped request; retrying unshaped and pausing shaping on the route",
		"call", call.ID, "route", call.Route, "status", status, "cooldown", s.breaker.cooldown)
	return true
}

// breaker pauses shaping per route after a rejection.
type breaker struct {
	anyStatus400 bool
	cooldown     time.Duration
	now          func() time.Time
	mu           sync.Mutex
	until        map[string]time.Time
	tripped      atomic.Int32 // len(until), read without the lock: none paused, none looked up
}

func newBreaker(c BreakerConfig) *breaker {
	return &breaker{anyStatus400: c.AnyStatus400, cooldown: c.Cooldown, now: time.Now, until: map[string]time.Time{}}
}

func (b *breaker) rejects(status int, body []byte) bool {
	if status == 400 && b.anyStatus400 {
		return true
	}
	return status >= 400 && status < 500 && bytes.Contains(bytes.ToLower(body), []byte("reasoning"))
}

func (b *breaker) trip(route string) {
	b.mu.Lock()
	b.until[route] = b.now().Add(b.cooldown)
	b.tripped.Store(int32(len(b.until)))
	b.mu.Unlock()
}

// paused reports whether shaping is paused on route. While no route is,
// it costs an atomic read (every request asks; a trip is rare), and a
// route that is not costs no clock read: its entry goes when its
// cool-down has passed.
func (b *breaker) paused(route string) bool {
	if b.tripped.Load() == 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	until, ok := b.until[route]
	if !ok {
		return false
	}
	if b.now().Before(until) {
		return true
	}
	delete(b.until, route)
	b.tripped.Store(int32(len(b.until)))
	return false
}
