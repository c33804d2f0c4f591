package main

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/shaperproxy/shaperproxy/fixtures"
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
	hold0, held0, over0, fresh0 := proxyCounts(b, px.URL)
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
	hold, held, over, fresh := proxyCounts(b, px.URL)
	if held > held0 {
		b.ReportMetric((hold-hold0)/float64(held-held0)*1e6, "hold-µs/op")
	}
	if n := over - over0 + fresh - fresh0; n > 0 {
		b.ReportMetric(100*(over-over0)/n, "%written-over")
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

// proxyCounts reads, at base's /metrics, the proxy's hold histogram (the
// seconds held in all, and how many requests) and its edited bodies
// written over an earlier one's and made fresh.
func proxyCounts(b *testing.B, base string) (hold float64, held uint64, over, fresh float64) {
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range fams["shaperproxy_request_hold_seconds"].GetMetric() {
		hold += m.GetHistogram().GetSampleSum()
		held += m.GetHistogram().GetSampleCount()
	}
	for _, m := range fams["shaperproxy_edited_bodies_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			switch {
			case l.GetName() != "how":
			case l.GetValue() == "written_over":
				over += m.GetCounter().GetValue()
			case l.GetValue() == "fresh":
				fresh += m.GetCounter().GetValue()
			}
		}
	}
	return hold, held, over, fresh
}
