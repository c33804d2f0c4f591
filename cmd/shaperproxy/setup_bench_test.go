package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/shaperproxy/shaperproxy/internal/bench"
	"github.com/shaperproxy/shaperproxy/internal/bigbuf"
	"github.com/shaperproxy/shaperproxy/internal/config"
	"github.com/tidwall/sjson"
)

// benchProxy starts an upstream that answers every request with a short
// chat completion and the proxy in front of it, configured by mod, and
// sends body through it b.N times. Besides the time, it reports the
// proxy's mean hold (hold-µs/op), the share of its large edited bodies
// written over an earlier one's (%written-over) and of large buffers
// made fresh (%fresh-bigbuf).
func benchProxy(b *testing.B, mod func(*config.Config), body []byte) {
	benchProxyEach(b, mod, body, func(do func()) { do() })
}

// benchProxyEach is benchProxy with each request sent by each.
func benchProxyEach(b *testing.B, mod func(*config.Config), body []byte, each func(do func())) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	}))
	defer up.Close()
	c := config.Default()
	c.DataDir = b.TempDir()
	c.Routes = c.WithDefaultRoute(up.URL)
	mod(&c)
	a, err := build(c, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	px := httptest.NewUnstartedServer(a)
	px.Config.ConnContext = a.ConnContext // as serve sets it
	px.Start()
	defer px.Close()
	// A test binary fills each released large buffer (a megabyte for the
	// seed) to catch a late reader; a production binary does not, and
	// the proxy releases the earlier request's body inside its hold.
	defer bigbuf.SetPoisoning(bigbuf.SetPoisoning(false))
	b.SetBytes(int64(len(body)))
	made0, reused0 := bigbuf.Counts()
	counts0 := proxyCounts(b, px.URL)
	for b.Loop() {
		each(func() {
			resp, err := http.Post(px.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	// The proxy's mean hold (from a body's last byte to its hand-off
	// upstream: parse, transforms, the request built), and the share of
	// its large edited bodies written over an earlier one's (the rest
	// copied whole and indexed anew), from its /metrics.
	counts := proxyCounts(b, px.URL)
	if d, ok := counts.HoldSince(counts0); ok {
		b.ReportMetric(float64(d.Nanoseconds())/1e3, "hold-µs/op")
	}
	if share, ok := counts.WrittenOverSince(counts0); ok {
		b.ReportMetric(share, "%written-over")
	}
	// The share of large buffers (a body read whole, an edited copy) made
	// fresh rather than taken from bigbuf's free list.
	made, reused := bigbuf.Counts()
	if n := made - made0 + reused - reused0; n > 0 {
		b.ReportMetric(100*float64(made-made0)/float64(n), "%fresh-bigbuf")
	}
}

// BenchmarkSeedRequest sends the seed's 631-message request through the
// proxy with the default configuration (shaping, originals, guard, capture).
func BenchmarkSeedRequest(b *testing.B) {
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	benchProxy(b, func(*config.Config) {}, body)
}

var small = []byte(`{"model":"deepseek-reasoner","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]}`)

// BenchmarkSmallRequest sends a small non-stream chat request through the
// proxy with shaping, capture and guard off (the transparent core).
func BenchmarkSmallRequest(b *testing.B) {
	benchProxy(b, func(c *config.Config) { c.Shaping.Enabled, c.Capture.Enabled, c.Guard.Enabled = false, false, false }, small)
}

// BenchmarkSmallRequestCapture is BenchmarkSmallRequest with capture on.
func BenchmarkSmallRequestCapture(b *testing.B) {
	benchProxy(b, func(c *config.Config) { c.Shaping.Enabled, c.Capture.Enabled, c.Guard.Enabled = false, true, false }, small)
}

// BenchmarkSmallRequestDefault sends a small non-stream chat request
// through the proxy with the default configuration (shaping, originals,
// guard, capture): the per-request cost of every default feature.
func BenchmarkSmallRequestDefault(b *testing.B) {
	benchProxy(b, func(*config.Config) {}, small)
}

// proxyCounts reads the proxy's counters that benchProxy reports.
func proxyCounts(b *testing.B, base string) bench.ProxyCounts {
	pc, err := bench.ReadProxyCounts(b.Context(), base+"/metrics")
	if err != nil {
		b.Fatal(err)
	}
	return pc
}
