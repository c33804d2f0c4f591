package proxy

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
)

// WithLabelValues hashes its label values and takes the vector's lock on
// every call; a request makes about ten such calls. The children are kept
// instead, by vector and label values: a lookup without a lock or an
// allocation (internal/resolved).

// maxLabels is the most label values a cached child has.
const maxLabels = 5

// childKey names a child: its vector and its label values.
type childKey struct {
	vec any
	lv  [maxLabels]string
}

// children holds the children of a Metrics' vectors, resolved once per
// vector and label values.
type children = resolved.Cache[childKey, any]

// maxChildren bounds the children kept (label values taken from requests
// are bounded already; past it the cache starts again).
const maxChildren = 4096

func getChild(c *children, vec any, lv []string, newChild func() any) any {
	k := childKey{vec: vec}
	copy(k.lv[:], lv)
	return c.Get(k, newChild)
}

// counter is vec.WithLabelValues(lv...), kept after its first use.
func (m *Metrics) counter(vec *prometheus.CounterVec, lv ...string) prometheus.Counter {
	if len(lv) > maxLabels {
		return vec.WithLabelValues(lv...)
	}
	return getChild(m.children, vec, lv, func() any { return vec.WithLabelValues(lv...) }).(prometheus.Counter)
}

// observer is vec.WithLabelValues(lv...), kept after its first use.
func (m *Metrics) observer(vec *prometheus.HistogramVec, lv ...string) prometheus.Observer {
	if len(lv) > maxLabels {
		return vec.WithLabelValues(lv...)
	}
	return getChild(m.children, vec, lv, func() any { return vec.WithLabelValues(lv...) }).(prometheus.Observer)
}

// lazyChild is a child resolved at its first use (a series appears when
// something is counted in it, as with WithLabelValues) and kept: later
// uses are one atomic load. Two first uses at once resolve the same
// child (a vector's WithLabelValues gives one child per label values).
type lazyChild[T any] struct{ p atomic.Pointer[T] }

func (l *lazyChild[T]) get(resolve func() T) T {
	if p := l.p.Load(); p != nil {
		return *p
	}
	v := resolve()
	l.p.Store(&v)
	return v
}

// callTimers are a route and model's timing children: finish looks them
// up once a call, where it looked up each (three to five lookups).
type callTimers struct {
	vecs                                                                       *Metrics
	route, model                                                               string
	duration, header, hold, firstByte, clientFirst, firstToken, streamDuration lazyChild[prometheus.Observer]
	streams                                                                    lazyChild[prometheus.Counter]
}

// timersOf returns the timing children of route and model.
func (m *Metrics) timersOf(route, model string) *callTimers {
	return m.timers.Get([2]string{route, model}, func() *callTimers {
		return &callTimers{vecs: m, route: route, model: model}
	})
}

func (t *callTimers) observer(l *lazyChild[prometheus.Observer], vec *prometheus.HistogramVec) prometheus.Observer {
	return l.get(func() prometheus.Observer { return vec.WithLabelValues(t.route, t.model) })
}

func (t *callTimers) streamCount() prometheus.Counter {
	return t.streams.get(func() prometheus.Counter { return t.vecs.streams.WithLabelValues(t.route, t.model) })
}

// bytesTo is the bytes counter of a direction ("upstream" or "client").
func (m *Metrics) bytesTo(l *lazyChild[prometheus.Counter], direction string) prometheus.Counter {
	return l.get(func() prometheus.Counter { return m.bytes.WithLabelValues(direction) })
}
