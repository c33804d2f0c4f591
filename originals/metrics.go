package originals

import "github.com/prometheus/client_golang/prometheus"

// Collectors are the writer's metrics: what it could not keep, and why.
func Collectors(w *Writer) []prometheus.Collector {
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(f()) })
	}
	return []prometheus.Collector{
		counter("shaperproxy_originals_dropped_total", "Originals not recorded because the write queue was full.", w.Dropped),
		counter("shaperproxy_originals_failed_total", "Originals lost to write errors (a full or failing disk).", w.Failed),
		counter("shaperproxy_originals_refused_total", "Originals refused because the table is at its size bound.", w.Refused),
		counter("shaperproxy_originals_evicted_total", "Idle conversations removed from the table to make room.", w.Evicted),
	}
}
