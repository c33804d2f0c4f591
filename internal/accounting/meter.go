package accounting

import (
	"maps"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
)

// DefaultMaxModels is how many distinct models per route a Meter names in
// its model label before it counts the others as "other".
const DefaultMaxModels = 8

// OtherModel is the model label of the models past the first ones seen.
const OtherModel = "other"

// Meter counts the tokens the upstreams report (Parse, from what a
// proxy found, conv.UsageWatcher) and their cost at the route's profile prices, per route,
// model and kind of call (Kind), as Prometheus counters. It is a
// proxy.Observer; it keeps nothing of a response but its usage. Safe for
// concurrent use.
type Meter struct {
	profiles *profile.Table
	models   *modelLabels
	calls    *prometheus.CounterVec
	tokens   map[string]*prometheus.CounterVec
	cost     *prometheus.CounterVec
	reported *prometheus.CounterVec

	sets *resolved.Cache[setKey, *meterSet]
}

var _ proxy.Observer = (*Meter)(nil)

// The token counters: the field of Usage each counts, its name and help
// (record adds the fields in this order).
var tokenMetrics = [...]struct{ field, name, help string }{
	{"prompt", "shaperproxy_usage_prompt_tokens_total", "Prompt (input) tokens the upstreams reported."},
	{"cache_hit", "shaperproxy_usage_cache_hit_tokens_total", "Prompt tokens the upstreams reported as served from their prompt cache."},
	{"cache_miss", "shaperproxy_usage_cache_miss_tokens_total", "Prompt tokens the upstreams reported as not served from their prompt cache (cache writes included)."},
	{"cache_write", "shaperproxy_usage_cache_write_tokens_total", "Prompt tokens the upstreams reported as written to their prompt cache (Anthropic)."},
	{"completion", "shaperproxy_usage_completion_tokens_total", "Completion (output) tokens the upstreams reported, reasoning included."},
	{"reasoning", "shaperproxy_usage_reasoning_tokens_total", "Reasoning tokens the upstreams reported."},
}

// NewMeter returns a Meter pricing with profiles (nil: the built-ins) and
// naming up to maxModels models per route (<= 0: DefaultMaxModels).
func NewMeter(profiles *profile.Table, maxModels int) *Meter {
	if profiles == nil {
		profiles = profile.NewTable(nil, nil)
	}
	if maxModels <= 0 {
		maxModels = DefaultMaxModels
	}
	labels := []string{"route", "model", "kind"}
	m := &Meter{
		profiles: profiles,
		models:   &modelLabels{max: maxModels, seen: map[string]map[string]bool{}},
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_usage_calls_total",
			Help: "Chat calls that ended, by route, model, kind (primary, review-child, review-continuation, deliberate-branch, deliberate-continuation) and whether the upstream reported a usage.",
		}, append(labels, "usage")),
		tokens: map[string]*prometheus.CounterVec{},
		sets:   resolved.New[setKey, *meterSet](maxSets),
		cost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_usage_cost_dollars_total",
			Help: "Cost of the reported tokens at the route's profile prices, in US dollars (calls whose profile knows no prices add nothing).",
		}, labels),
		reported: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "shaperproxy_usage_reported_cost_dollars_total",
			Help: "Cost the upstreams themselves reported (OpenRouter's usage.cost), in US dollars.",
		}, labels),
	}
	for _, t := range tokenMetrics {
		m.tokens[t.field] = prometheus.NewCounterVec(prometheus.CounterOpts{Name: t.name, Help: t.help}, labels)
	}
	return m
}

// Collectors are the Meter's metrics.
func (m *Meter) Collectors() []prometheus.Collector {
	out := []prometheus.Collector{m.calls, m.cost, m.reported}
	for _, t := range tokenMetrics {
		out = append(out, m.tokens[t.field])
	}
	return out
}

// Request returns the sink that counts the call at its end, from the
// usage the proxy found in the response (proxy.End.Usage).
func (m *Meter) Request(call *proxy.Call, _ *proxy.Upstream) proxy.ResponseSink {
	return &meterSink{m: m, call: call}
}

// record counts one ended call.
func (m *Meter) record(call *proxy.Call, end proxy.End) {
	u, _, ok := Parse(end.Usage)
	if !ok && !call.Chat {
		return
	}
	model := call.Model
	if model == "" {
		model = end.UsageModel
	}
	set := m.set(call.Route, model, Kind(call.Internal, call.Purpose))
	if !ok {
		set.missing.get().Inc()
		return
	}
	set.reported.get().Inc()
	for i, v := range [...]int64{u.Prompt, u.Hit, u.Miss, u.CacheWrite, u.Output, u.Reasoning} {
		set.tokens[i].get().Add(float64(v))
	}
	if c := Price(set.prices, u); c.USDKnown {
		set.cost.get().Add(c.USD)
	}
	if u.CostReported > 0 {
		set.reportedCost.get().Add(u.Cost)
	}
}

// meterSet is what record needs for one route, model and kind: the
// counters' children and the prices, resolved once (label lookups hash
// and lock; a call makes nine).
type meterSet struct {
	missing, reported  lazyCounter
	tokens             [len(tokenMetrics)]lazyCounter
	cost, reportedCost lazyCounter
	prices             profile.Prices
}

// lazyCounter is a counter's child made at its first use: a series
// appears when something is counted in it, as with WithLabelValues.
type lazyCounter struct {
	once sync.Once
	c    prometheus.Counter
	vec  *prometheus.CounterVec
	l    prometheus.Labels
}

func (z *lazyCounter) get() prometheus.Counter {
	z.once.Do(func() { z.c = z.vec.With(z.l) })
	return z.c
}

type setKey struct{ route, model, kind string }

// maxSets bounds the sets kept (past it they are resolved again).
const maxSets = 4096

func (m *Meter) set(route, model, kind string) *meterSet {
	return m.sets.Get(setKey{route, model, kind}, func() *meterSet { return m.newSet(route, model, kind) })
}

func (m *Meter) newSet(route, model, kind string) *meterSet {
	l := prometheus.Labels{"route": route, "model": m.models.label(route, model), "kind": kind}
	with := func(state string) prometheus.Labels {
		out := prometheus.Labels{"usage": state}
		maps.Copy(out, l)
		return out
	}
	s := &meterSet{
		missing: lazyCounter{vec: m.calls, l: with("missing")}, reported: lazyCounter{vec: m.calls, l: with("reported")},
		cost: lazyCounter{vec: m.cost, l: l}, reportedCost: lazyCounter{vec: m.reported, l: l},
		prices: m.profiles.ForRoute(route, model).Prices,
	}
	for i, t := range tokenMetrics {
		s.tokens[i] = lazyCounter{vec: m.tokens[t.field], l: l}
	}
	return s
}

// meterSink counts one response at its end, from the usage the proxy
// found in it (proxy.End.Usage).
type meterSink struct {
	m    *Meter
	call *proxy.Call
}

func (s *meterSink) Response(*proxy.ResponseInfo)         {}
func (s *meterSink) Event(*sse.Event, int, time.Duration) {}
func (s *meterSink) Body([]byte)                          {}

func (s *meterSink) End(end proxy.End) {
	if end.Outcome == proxy.OutcomeRetried {
		return // an attempt dropped for a retry: the call is counted once, by the attempt that answered
	}
	s.m.record(s.call, end)
}

// modelLabels bounds the model label: the first max models seen on each
// route keep their name, later ones are "other".
type modelLabels struct {
	max  int
	mu   sync.Mutex
	seen map[string]map[string]bool // route → models named
}

func (l *modelLabels) label(route, model string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	named := l.seen[route]
	if named == nil {
		named = map[string]bool{}
		l.seen[route] = named
	}
	if named[model] {
		return model
	}
	if len(named) < l.max {
		named[model] = true
		return model
	}
	return OtherModel
}
