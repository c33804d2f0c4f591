package accounting

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/internal/profile"
	"github.com/shaperproxy/shaperproxy/proxy"
	"github.com/shaperproxy/shaperproxy/sse"
)

// DefaultMaxModels is how many distinct models per route a Meter names in
// its model label before it counts the others as "other".
const DefaultMaxModels = 8

// OtherModel is the model label of the models past the first ones seen.
const OtherModel = "other"

// Meter counts the tokens the upstreams report (Parse, from what a
// Watcher finds) and their cost at the route's profile prices, per route,
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
}

var _ proxy.Observer = (*Meter)(nil)

// The token counters: the field of Usage each counts, its name and help.
var tokenMetrics = []struct{ field, name, help string }{
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

// Request returns the sink that watches the response for its usage.
func (m *Meter) Request(call *proxy.Call, _ *proxy.Upstream) proxy.ResponseSink {
	return &meterSink{m: m, call: call}
}

// record counts one ended call.
func (m *Meter) record(call *proxy.Call, w *Watcher) {
	raw := w.Raw()
	u, _, ok := Parse(raw)
	if !ok && !call.Chat {
		return
	}
	model := call.Model
	if model == "" {
		model = w.Model()
	}
	l := prometheus.Labels{"route": call.Route, "model": m.models.label(call.Route, model), "kind": Kind(call.Internal, call.Purpose)}
	state := "missing"
	if ok {
		state = "reported"
	}
	m.calls.MustCurryWith(l).WithLabelValues(state).Inc()
	if !ok {
		return
	}
	for name, v := range map[string]int64{"prompt": u.Prompt, "cache_hit": u.Hit, "cache_miss": u.Miss,
		"cache_write": u.CacheWrite, "completion": u.Output, "reasoning": u.Reasoning} {
		m.tokens[name].With(l).Add(float64(v))
	}
	if c := Price(m.profiles.ForRoute(call.Route, model).Prices, u); c.USDKnown {
		m.cost.With(l).Add(c.USD)
	}
	if u.CostReported > 0 {
		m.reported.With(l).Add(u.Cost)
	}
}

// meterSink watches one response.
type meterSink struct {
	m    *Meter
	call *proxy.Call
	w    Watcher
}

func (s *meterSink) Response(*proxy.ResponseInfo) {}

func (s *meterSink) Event(ev *sse.Event, _ int, _ time.Duration) {
	if ev.HasData && !ev.Truncated {
		s.w.Event(ev.Data)
	}
}

func (s *meterSink) Body(p []byte) { s.w.Body(p) }

func (s *meterSink) End(proxy.End) { s.m.record(s.call, &s.w) }

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
