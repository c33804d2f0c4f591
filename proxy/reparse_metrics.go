package proxy

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/shaperproxy/shaperproxy/conv"
)

// reparseCollector reports what the proxies' conv.Reparsers did: how much
// of each chat request's history was taken from the conversation's
// previous request instead of parsed again, and how many edited bodies
// were written over the previous request's. The fast paths of a long
// history show in these counters (a low share says the traffic does not
// repeat, or the bound is too small for it).
//
// A Metrics made by NewMetrics has one, registered with it; each Proxy
// made with that Metrics adds its Reparser, and the counters are their
// sums (two proxies may share one Metrics).
type reparseCollector struct {
	mu                                    sync.Mutex
	rps                                   []*conv.Reparser
	requests, msgs, keyed, written, bytes *prometheus.Desc
}

// add counts rp's parses from now on.
func (c *reparseCollector) add(rp *conv.Reparser) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rps = append(c.rps, rp)
}

// stats sums the Reparsers' stats.
func (c *reparseCollector) stats() conv.ReparseStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t conv.ReparseStats
	for _, rp := range c.rps {
		s := rp.Stats()
		t.Repeated, t.New, t.Reused, t.Parsed = t.Repeated+s.Repeated, t.New+s.New, t.Reused+s.Reused, t.Parsed+s.Parsed
		t.Keyed += s.Keyed
		t.WrittenOver, t.Fresh = t.WrittenOver+s.WrittenOver, t.Fresh+s.Fresh
		t.Kept, t.Written = t.Kept+s.Kept, t.Written+s.Written
	}
	return t
}

func newReparseCollector() *reparseCollector {
	return &reparseCollector{
		requests: prometheus.NewDesc("shaperproxy_history_requests_total",
			"Bodies sent to the chat completions path and parsed, by whether they were read against an earlier request whose messages they repeat (repeated) or not (new: parsed whole, or no chat request).",
			[]string{"how"}, nil),
		msgs: prometheus.NewDesc("shaperproxy_history_messages_total",
			"Messages of chat requests, by whether they were taken from an earlier request's parse (reused) or validated and parsed (parsed).",
			[]string{"how"}, nil),
		keyed: prometheus.NewDesc("shaperproxy_history_keyed_messages_total",
			"Of the messages taken from an earlier request's parse, those found the same by the keys of the two bodies' blocks, taken as the bodies were read, without comparing them.",
			nil, nil),
		written: prometheus.NewDesc("shaperproxy_edited_bodies_total",
			"Request bodies of 64 KiB and more a transform edited, by whether they were written over the body edited for an earlier request of the conversation (written_over) or made whole (fresh).",
			[]string{"how"}, nil),
		bytes: prometheus.NewDesc("shaperproxy_edited_bytes_total",
			"Bytes of those bodies, by whether they were already in place in the body written over (kept) or written (written; all of a fresh body's).",
			[]string{"how"}, nil),
	}
}

func (c *reparseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.msgs
	ch <- c.keyed
	ch <- c.written
	ch <- c.bytes
}

func (c *reparseCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	counter := func(d *prometheus.Desc, v int64, how string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), how)
	}
	counter(c.requests, s.Repeated, "repeated")
	counter(c.requests, s.New, "new")
	counter(c.msgs, s.Reused, "reused")
	counter(c.msgs, s.Parsed, "parsed")
	ch <- prometheus.MustNewConstMetric(c.keyed, prometheus.CounterValue, float64(s.Keyed))
	counter(c.written, s.WrittenOver, "written_over")
	counter(c.written, s.Fresh, "fresh")
	counter(c.bytes, s.Kept, "kept")
	counter(c.bytes, s.Written, "written")
}
