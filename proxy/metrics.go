package proxy

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the proxy's Prometheus registry and its collectors. Other
// parts of the program register their own collectors with Register.
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
	firstByte       *prometheus.HistogramVec
	inflight        prometheus.Gauge
	refused         *prometheus.CounterVec
	truncated       prometheus.Counter
	truncatedBytes  prometheus.Counter
}

// NewMetrics returns a fresh set of metrics in its own registry.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_requests_total", Help: "Requests proxied, by route, method (a standard method or \"other\"), status and outcome.",
	}, []string{"route", "method", "status", "outcome"})
	m.streams = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_streams_total", Help: "SSE responses proxied, by route.",
	}, []string{"route"})
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
		Name: "shaperproxy_transform_errors_total", Help: "Request transforms that failed; the request went on without them.",
	})
	m.retries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shaperproxy_retries_total", Help: "Requests sent a second time without a transform, after the upstream rejected the transformed one, by route.",
	}, []string{"route"})
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shaperproxy_request_duration_seconds", Help: "Time from request to the end of the response, by route.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
	}, []string{"route"})
	m.firstByte = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "shaperproxy_upstream_header_seconds", Help: "Time from request to the upstream response header, by route.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
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
	m.reg.MustRegister(m.requests, m.streams, m.bytes, m.events, m.upstreamErrors,
		m.transformErrors, m.retries, m.duration, m.firstByte, m.inflight,
		m.refused, m.truncated, m.truncatedBytes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
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
