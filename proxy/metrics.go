package proxy

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
)

// Metrics is the proxy's Prometheus registry and its collectors. Other
// parts of the program register their own collectors with Register.
//
// Names follow Prometheus conventions: the unit in the name (seconds,
// bytes), _total on counters. Labels taken from requests have a bounded
// set of values: a model or host name is kept for the first maxModels or
// maxHosts distinct names, any later one is "other".
type Metrics struct {
	reg             *prometheus.Registry
	requests        *prometheus.CounterVec
	streams         *prometheus.CounterVec
	bytes           *prometheus.CounterVec
	events          prometheus.Counter
	upstreamErrors  *prometheus.CounterVec
	transformErrors prometheus.Counter
	retries         *prometheus.CounterVec
	duration        *prometheus.HistogramVec
	header          *prometheus.HistogramVec
	hold            *prometheus.HistogramVec
	holdStep        *prometheus.HistogramVec
	firstByte       *prometheus.HistogramVec
	clientFirst     *prometheus.HistogramVec
	firstToken      *prometheus.HistogramVec
	streamDuration  *prometheus.HistogramVec
	inflight        prometheus.Gauge
	refused         *prometheus.CounterVec
	truncated       prometheus.Counter
	truncatedBytes  prometheus.Counter
	tunnels         *prometheus.CounterVec
	tunnelsOpen     *prometheus.GaugeVec
	tunnelBytes     *prometheus.CounterVec
	tunnelDuration  *prometheus.HistogramVec
	models          *labelSet
	hosts           *labelSet
	children        *children // the vectors' children by label values (metriccache.go)
	timers          *resolved.Cache[[2]string, *callTimers]
	bytesUpstream   lazyChild[prometheus.Counter]
	bytesClient     lazyChild[prometheus.Counter]
	reparse         *reparseCollector
}

// The most distinct values the model and host labels take; later ones are
// counted as "other".
const (
	maxModels  = 32
	maxHosts   = 64
	otherLabel = "other"
)

// durationBuckets are the buckets of every duration histogram: from 5 ms
// to 30 minutes, since a reasoning stream can run that long.
var durationBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120, 300, 600, 1200, 1800}

// NewMetrics returns a fresh set of metrics in its own registry.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), models: newLabelSet(maxModels), hosts: newLabelSet(maxHosts), children: resolved.New[childKey, any](maxChildren),
		timers: resolved.New[[2]string, *callTimers](maxChildren), reparse: newReparseCollector()}
	m.newCallMetrics()
	m.newTimingMetrics()
	m.newTunnelMetrics()
	m.reg.MustRegister(m.requests, m.streams, m.bytes, m.events, m.upstreamErrors,
		m.transformErrors, m.retries, m.duration, m.header, m.hold, m.holdStep, m.firstByte, m.clientFirst, m.firstToken,
		m.streamDuration, m.inflight, m.refused, m.truncated, m.truncatedBytes,
		m.tunnels, m.tunnelsOpen, m.tunnelBytes, m.tunnelDuration, m.reparse,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// newCallMetrics makes the counters of calls and what they carried.
func (m *Metrics) newCallMetrics() {
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_requests_total", Help: "Requests proxied, by route, method (a standard method or \"other\"), status, outcome and model.",
	}, []string{"route", "method", "status", "outcome", "model"})
	m.streams = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_streams_total", Help: "SSE responses proxied, by route and model.",
	}, []string{"route", "model"})
	m.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_bytes_total", Help: "Body bytes proxied, by direction (upstream = request bodies sent, client = response bodies written).",
	}, []string{"direction"})
	m.events = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shaperproxy_stream_events_total", Help: "SSE events forwarded to clients.",
	})
	m.upstreamErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_upstream_errors_total", Help: "Upstream calls that failed (unreachable, timeout, cut), by route and outcome.",
	}, []string{"route", "outcome"})
	m.transformErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shaperproxy_transform_errors_total", Help: "Request transforms that failed (the request went on without them), and work a transform left beside the request that panicked.",
	})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_retries_total", Help: "Requests sent a second time without a transform, after the upstream rejected the transformed one, by route.",
	}, []string{"route"})
	m.inflight = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shaperproxy_inflight_requests", Help: "Requests being proxied now.",
	})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_refused_total", Help: "Requests refused before anything was forwarded, by reason (host_not_allowed, origin_not_allowed, client_key_required, proxy_key_required, target_not_allowed, loopback_only, own_listener).",
	}, []string{"reason"})
	m.truncated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shaperproxy_events_truncated_total", Help: "SSE events longer than the proxy keeps (max event bytes): the client got them whole, the observers their beginning, marked truncated.",
	})
	m.truncatedBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shaperproxy_event_bytes_cut_total", Help: "Bytes of truncated SSE events the observers did not get.",
	})
}

// newTimingMetrics makes the latency histograms, by route and model.
func (m *Metrics) newTimingMetrics() {
	hist := func(name, help string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: durationBuckets}, []string{"route", "model"})
	}
	m.duration = hist("shaperproxy_request_duration_seconds", "Time from request to the end of the response, by route and model.")
	m.header = hist("shaperproxy_upstream_header_seconds", "Time from request to the upstream response header, by route and model.")
	m.firstByte = hist("shaperproxy_time_to_first_byte_seconds", "Time from request to the first byte of the upstream response body, by route and model.")
	m.clientFirst = hist("shaperproxy_client_first_byte_seconds", "Time from request to the first bytes of the answer flushed to the client (a whole body, or a stream's header with its first event), by route and model; answers the proxy makes itself (refusals, upstream failures) are not counted.")
	m.firstToken = hist("shaperproxy_time_to_first_token_seconds", "Time from request to the first chat stream event carrying content or reasoning text, by route and model.")
	m.streamDuration = hist("shaperproxy_stream_duration_seconds", "Time from the response header of an SSE response to its end, by route and model.")
	m.hold = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shaperproxy_request_hold_seconds", Buckets: holdBuckets,
		Help: "Time the proxy held a request between the last byte of its body from the client and its hand-off to the upstream's transport (parse, transforms; the observers are told beside the trip), by route and model; requests whose body it did not read whole are not counted.",
	}, []string{"route", "model"})
	m.holdStep = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shaperproxy_request_hold_step_seconds", Buckets: holdBuckets,
		Help: "The hold of chat requests (shaperproxy_request_hold_seconds) by step: parse (the body read into its view), each request transform by its type (review.Restorer, guard.Hook, reqshape.Shaper, ...), send (the upstream request built and handed to the transport).",
	}, []string{"step"})
}

// holdBuckets are the buckets of the hold histogram: the proxy's own work
// on a request, from 10 µs to a second.
var holdBuckets = []float64{0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}

// newTunnelMetrics makes the metrics of CONNECT and proxy-form traffic.
func (m *Metrics) newTunnelMetrics() {
	m.tunnels = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_tunnels_total", Help: "CONNECT tunnels and proxy-form requests, counted when they open, by mode (intercepted, tunnelled, refused), via (connect, proxy-form) and host.",
	}, []string{"mode", "via", "host"})
	m.tunnelsOpen = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "shaperproxy_tunnels_open", Help: "CONNECT tunnels and proxy-form requests open now, by mode.",
	}, []string{"mode"})
	m.tunnelBytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_tunnel_bytes_total", Help: "Bytes relayed by tunnels and proxy-form requests, counted when they close, by mode and direction (upstream = from the client, client = to the client).",
	}, []string{"mode", "direction"})
	m.tunnelDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shaperproxy_tunnel_duration_seconds", Help: "How long tunnels and proxy-form requests stayed open, by mode.", Buckets: durationBuckets,
	}, []string{"mode"})
	for _, mode := range []string{tunnelIntercepted, tunnelTunnelled} {
		m.tunnelsOpen.WithLabelValues(mode)
		for _, dir := range []string{"upstream", "client"} {
			m.tunnelBytes.WithLabelValues(mode, dir)
		}
	}
}

// initRoute makes the series of a route that alerts compute rates of, so
// they exist (at zero) before the first error.
func (m *Metrics) initRoute(route string) {
	m.upstreamErrors.WithLabelValues(route, string(OutcomeUpstreamError))
	m.upstreamErrors.WithLabelValues(route, string(OutcomeTimeout))
	m.retries.WithLabelValues(route)
}

// Register adds collectors to the registry.
func (m *Metrics) Register(cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := m.reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// labelSet bounds the values of a label taken from requests: the first
// max distinct values keep their name, any later one is "other", so a
// client cannot make a series per made-up name. It is safe for concurrent
// use.
type labelSet struct {
	max  int
	mu   sync.Mutex
	seen map[string]bool
}

func newLabelSet(max int) *labelSet { return &labelSet{max: max, seen: map[string]bool{}} }

// value returns the label value for v ("" stays "").
func (s *labelSet) value(v string) string { return s.label(v, true) }

// known is value for a name that must not take a place in the set (the
// host of a refused tunnel, the model of a call that did not succeed:
// anyone may send those): its own label only if it already has one.
func (s *labelSet) known(v string) string { return s.label(v, false) }

func (s *labelSet) label(v string, admit bool) string {
	if v == "" {
		return ""
	}
	v = clip(v, maxLabelBytes) // valid UTF-8, which the client library requires
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen[v] {
		return v
	}
	if !admit || len(s.seen) >= s.max {
		return otherLabel
	}
	s.seen[v] = true
	return v
}

// maxLabelBytes bounds a label value taken from a request.
const maxLabelBytes = 100
