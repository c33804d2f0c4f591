package proxy

import "testing"

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
