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
// pace), and reports, for the requests that took a fresh large buffer
// (internal/bigbuf's free list was empty) and for the others, their mean
// latency and minor page faults (the process's, where the system counts
// them), and how many requests there were one fresh: what sets the tail
// of a round of 30 requests. Run it with a count: -benchtime=300x.
func BenchmarkSeedRequestPaced(b *testing.B) {
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	type group struct {
		d      time.Duration
		faults int64
		n      int
	}
	var fresh, reused group
	send := func(do func()) {
		made0, _ := bigbuf.Counts()
		f0, start := minorFaults(), time.Now()
		do()
		d, f := time.Since(start), minorFaults()-f0
		g := &reused
		if made, _ := bigbuf.Counts(); made != made0 {
			g = &fresh
		}
		g.d, g.faults, g.n = g.d+d, g.faults+f, g.n+1
		b.StopTimer() // ns/op is the requests' mean latency, the pause aside
		time.Sleep(50 * time.Millisecond)
		b.StartTimer()
	}
	benchProxyEach(b, func(*config.Config) {}, body, send)
	for _, g := range []struct {
		name string
		group
	}{{"fresh-buffer", fresh}, {"reused-buffers", reused}} {
		if g.n == 0 {
			continue
		}
		b.ReportMetric(float64(g.d.Microseconds())/float64(g.n)/1e3, "ms/req-"+g.name)
		b.ReportMetric(float64(g.faults)/float64(g.n), "faults/req-"+g.name)
	}
	if fresh.n > 0 {
		b.ReportMetric(float64(fresh.n+reused.n)/float64(fresh.n), "req/fresh")
	}
}

// BenchmarkSmallRequestPaced sends the cost section's small request (a
// conversation's first: two messages) through the transparent core
// ("core") and the default configuration ("default") one at a time, 2 ms
// apart (the cost section's latency pace), and reports each proxy's mean
// hold (hold-µs/op): its own work on a request whose caches went cold
// between requests, several times what the same work takes back to back
// (BenchmarkSmallRequest, BenchmarkSmallRequestDefault).
func BenchmarkSmallRequestPaced(b *testing.B) {
	body := []byte(`{"model":"deepseek-reasoner","stream":false,"messages":[{"role":"system","content":"You are a careful coding assistant."},{"role":"user","content":"Say hello to user 3."}]}`)
	paced := func(b *testing.B) func(do func()) {
		return func(do func()) {
			do()
			b.StopTimer() // ns/op is the requests' mean latency, the pause aside
			time.Sleep(2 * time.Millisecond)
			b.StartTimer()
		}
	}
	b.Run("core", func(b *testing.B) {
		benchProxyEach(b, func(c *config.Config) { c.Shaping.Enabled, c.Capture.Enabled, c.Guard.Enabled = false, false, false }, body, paced(b))
	})
	b.Run("default", func(b *testing.B) { benchProxyEach(b, func(*config.Config) {}, body, paced(b)) })
}
