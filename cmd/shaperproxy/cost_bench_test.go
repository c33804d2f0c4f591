package main

import (
	"runtime"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/fixtures"
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
// pace), and reports the mean latency of the requests during which a
// garbage collection ran apart from the others, and how many requests
// there were a collection: what sets the 99th percentile of a round of
// 30 requests. Run it with a count: -benchtime=300x.
func BenchmarkSeedRequestPaced(b *testing.B) {
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	var withGC, without time.Duration
	var nGC, n int
	send := func(do func()) {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		gc0, start := ms.NumGC, time.Now()
		do()
		d := time.Since(start)
		runtime.ReadMemStats(&ms)
		if ms.NumGC != gc0 {
			withGC += d
			nGC++
		} else {
			without += d
			n++
		}
		time.Sleep(50 * time.Millisecond)
	}
	benchProxyEach(b, func(*config.Config) {}, body, send)
	if nGC > 0 && n > 0 {
		b.ReportMetric(float64(withGC.Microseconds())/float64(nGC)/1e3, "ms/req-with-gc")
		b.ReportMetric(float64(without.Microseconds())/float64(n)/1e3, "ms/req-without-gc")
		b.ReportMetric(float64(nGC+n)/float64(nGC), "req/gc")
	}
}
