package proxy

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/conv"
)

// reparseCollector reports what the proxy's conv.Reparser did: how much
// of each chat request's history was taken from the conversation's
// previous request instead of parsed again, and how many edited bodies
// were written over the previous request's. The fast paths of a long
// history show in these counters (a low share says the traffic does not
// repeat, or the bound is too small for it).
type reparseCollector struct {
	rp                      *conv.Reparser
	requests, msgs, written *prometheus.Desc
}

func newReparseCollector(rp *conv.Reparser) *reparseCollector {
	return &reparseCollector{
		rp: rp,
		requests: prometheus.NewDesc("shaperproxy_history_requests_total",
			"Chat request bodies parsed, by whether they were read against an earlier request whose messages they repeat (repeated) or parsed whole (new).",
			[]string{"how"}, nil),
		msgs: prometheus.NewDesc("shaperproxy_history_messages_total",
			"Messages of chat requests, by whether they were taken from an earlier request's parse (reused) or validated and parsed (parsed).",
			[]string{"how"}, nil),
		written: prometheus.NewDesc("shaperproxy_edited_bodies_total",
			"Large request bodies a transform edited, by whether they were written over the body edited for an earlier request of the conversation (written_over) or made whole (fresh).",
			[]string{"how"}, nil),
	}
}

func (c *reparseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.msgs
	ch <- c.written
}

func (c *reparseCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.rp.Stats()
	counter := func(d *prometheus.Desc, v int64, how string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), how)
	}
	counter(c.requests, s.Repeated, "repeated")
	counter(c.requests, s.Requests-s.Repeated, "new")
	counter(c.msgs, s.Reused, "reused")
	counter(c.msgs, s.Parsed, "parsed")
	counter(c.written, s.WrittenOver, "written_over")
	counter(c.written, s.Fresh, "fresh")
}
