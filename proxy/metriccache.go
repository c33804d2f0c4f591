package proxy

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// WithLabelValues hashes its label values and takes the vector's lock on
// every call; a request makes about ten such calls. The children are kept
// instead, by vector and label values: a lookup in a map under a read
// lock, without allocation.

// maxLabels is the most label values a cached child has.
const maxLabels = 5

// childKey names a child: its vector and its label values.
type childKey struct {
	vec any
	lv  [maxLabels]string
}

// children holds the children of a Metrics' vectors.
type children struct {
	mu sync.RWMutex
	m  map[childKey]any
}

// maxChildren bounds the children kept (label values taken from requests
// are bounded already; past it the cache starts again).
const maxChildren = 4096

func (c *children) get(vec any, lv []string, newChild func() any) any {
	k := childKey{vec: vec}
	copy(k.lv[:], lv)
	c.mu.RLock()
	v, ok := c.m[k]
	c.mu.RUnlock()
	if ok {
		return v
	}
	v = newChild()
	c.mu.Lock()
	if c.m == nil || len(c.m) >= maxChildren {
		c.m = make(map[childKey]any)
	}
	c.m[k] = v
	c.mu.Unlock()
	return v
}

// counter is vec.WithLabelValues(lv...), kept after its first use.
func (m *Metrics) counter(vec *prometheus.CounterVec, lv ...string) prometheus.Counter {
	if len(lv) > maxLabels {
		return vec.WithLabelValues(lv...)
	}
	return m.children.get(vec, lv, func() any { return vec.WithLabelValues(lv...) }).(prometheus.Counter)
}

// observer is vec.WithLabelValues(lv...), kept after its first use.
func (m *Metrics) observer(vec *prometheus.HistogramVec, lv ...string) prometheus.Observer {
	if len(lv) > maxLabels {
		return vec.WithLabelValues(lv...)
	}
	return m.children.get(vec, lv, func() any { return vec.WithLabelValues(lv...) }).(prometheus.Observer)
}
