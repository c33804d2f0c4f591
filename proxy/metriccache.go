package proxy

import (
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
