package proxy

import (
	"strconv"
	"testing"
)

// TestMetricChildren: a cached child is the vector's own, and a lookup
// allocates nothing.
func TestMetricChildren(t *testing.T) {
	m := NewMetrics()
	c := m.counter(m.requests, "r", "POST", "200", "complete", "m")
	c.Inc()
	if c != m.requests.WithLabelValues("r", "POST", "200", "complete", "m") {
		t.Fatal("cached counter is not the vector's child")
	}
	if m.counter(m.requests, "r", "POST", "200", "complete", "m") != c || m.counter(m.requests, "r", "POST", "500", "complete", "m") == c {
		t.Fatal("children mixed up")
	}
	if m.observer(m.duration, "r", "m") != m.duration.WithLabelValues("r", "m") {
		t.Fatal("cached observer is not the vector's child")
	}
	if n := testing.AllocsPerRun(100, func() {
		m.counter(m.requests, "r", "POST", "200", "complete", "m").Inc()
		m.observer(m.duration, "r", "m").Observe(1)
	}); n != 0 {
		t.Errorf("%v allocations per lookup", n)
	}
}

// TestMetricChildrenBounded: the cache holds at most maxChildren children
// however many label values come (past the bound it starts again), and a
// lookup after that still gives the vector's own child.
func TestMetricChildrenBounded(t *testing.T) {
	m := NewMetrics()
	for i := range 3 * maxChildren {
		m.counter(m.upstreamErrors, "r", strconv.Itoa(i))
	}
	if n := m.children.Len(); n == 0 || n > maxChildren {
		t.Fatalf("%d children kept, want 1 to %d", n, maxChildren)
	}
	if m.counter(m.upstreamErrors, "r", "7") != m.upstreamErrors.WithLabelValues("r", "7") {
		t.Fatal("child after a restart is not the vector's")
	}
}

// TestCallTimers: a route and model's timing children are the vectors'
// own, made at their first use (a series appears only once counted in),
// and a call's lookups allocate nothing.
func TestCallTimers(t *testing.T) {
	m := NewMetrics()
	ts := m.timersOf("r", "m")
	if m.timersOf("r", "m") != ts || m.timersOf("r", "n") == ts {
		t.Fatal("timers mixed up")
	}
	if ts.firstToken.p.Load() != nil || ts.streams.p.Load() != nil {
		t.Fatal("children made before their first use")
	}
	if ts.observer(&ts.duration, m.duration) != m.duration.WithLabelValues("r", "m") ||
		ts.observer(&ts.header, m.header) != m.header.WithLabelValues("r", "m") ||
		ts.streamCount() != m.streams.WithLabelValues("r", "m") {
		t.Fatal("a timer is not the vector's child")
	}
	if m.bytesTo(&m.bytesClient, "client") != m.bytes.WithLabelValues("client") ||
		m.bytesTo(&m.bytesUpstream, "upstream") != m.bytes.WithLabelValues("upstream") {
		t.Fatal("a bytes counter is not the vector's child")
	}
	if n := testing.AllocsPerRun(100, func() {
		ts := m.timersOf("r", "m")
		ts.observer(&ts.duration, m.duration).Observe(1)
		ts.observer(&ts.firstByte, m.firstByte).Observe(1)
		m.bytesTo(&m.bytesClient, "client").Add(1)
	}); n != 0 {
		t.Errorf("%v allocations a call", n)
	}
}
