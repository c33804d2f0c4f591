package main

import (
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/tidwall/sjson"
)

// withReviewAndDeliberate is the default configuration with the masked
// review and the deliberate tool on every route: the deliberate tool is
// added to every request that declares tools, and both finishers follow
// every chat response (they act on some only).
func withReviewAndDeliberate(c *config.Config) {
	c.Review.Routes = []string{"*"}
	c.Deliberate.Routes = []string{"*"}
}

// BenchmarkSeedRequestAll is BenchmarkSeedRequest with the review and the
// deliberate tool on (the request declares tools, so it gets the tool).
func BenchmarkSeedRequestAll(b *testing.B) {
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	benchProxy(b, withReviewAndDeliberate, body)
}

// BenchmarkSmallRequestAll is BenchmarkSmallRequestDefault with the review
// and the deliberate tool on.
func BenchmarkSmallRequestAll(b *testing.B) {
	benchProxy(b, withReviewAndDeliberate, small)
}

// BenchmarkSeedRequestPaced sends the seed's request through the default
// configuration one at a time, 50 ms apart (the cost section's latency
// pace), and reports the mean latency of the requests that took a fresh
// large buffer (internal/bigbuf's free list was empty) apart from the
// others, and how many requests there were one such: what sets the tail
// of a round of 30 requests. Run it with a count: -benchtime=300x.
func BenchmarkSeedRequestPaced(b *testing.B) {
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	var fresh, reused time.Duration
	var nFresh, nReused int
	send := func(do func()) {
		made0, _ := bigbuf.Counts()
		start := time.Now()
		do()
		d := time.Since(start)
		if made, _ := bigbuf.Counts(); made != made0 {
			fresh += d
			nFresh++
		} else {
			reused += d
			nReused++
		}
		time.Sleep(50 * time.Millisecond)
	}
	benchProxyEach(b, func(*config.Config) {}, body, send)
	if nFresh > 0 && nReused > 0 {
		b.ReportMetric(float64(fresh.Microseconds())/float64(nFresh)/1e3, "ms/req-fresh-buffer")
		b.ReportMetric(float64(reused.Microseconds())/float64(nReused)/1e3, "ms/req-reused-buffers")
		b.ReportMetric(float64(nFresh+nReused)/float64(nFresh), "req/fresh")
	}
}
