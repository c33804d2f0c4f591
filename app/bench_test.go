package app_test

import (
	"bytes"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/shaperproxy/shaperproxy/app"
	"github.com/shaperproxy/shaperproxy/config"
	"github.com/shaperproxy/shaperproxy/fixtures"
	"github.com/tidwall/sjson"
)

// BenchmarkSeedRequest sends the seed's 631-message request through the
// proxy with the default configuration (shaping, originals, capture).
func BenchmarkSeedRequest(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	}))
	defer up.Close()
	c := config.Default()
	c.DataDir = b.TempDir()
	c.Routes = c.WithDefaultRoute(up.URL)
	a, err := app.Build(c, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	px := httptest.NewServer(a.Proxy)
	defer px.Close()
	body, _ := sjson.SetBytes(fixtures.SeedHistory(), "stream", false)
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		resp, err := http.Post(px.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkSmallRequest sends a small non-stream chat request through the
// proxy with shaping, capture and guard off (the transparent core).
func BenchmarkSmallRequest(b *testing.B) { benchSmall(b, false) }

// BenchmarkSmallRequestCapture is BenchmarkSmallRequest with capture on.
func BenchmarkSmallRequestCapture(b *testing.B) { benchSmall(b, true) }

func benchSmall(b *testing.B, withCapture bool) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`))
	}))
	defer up.Close()
	c := config.Default()
	c.DataDir = b.TempDir()
	c.Routes = c.WithDefaultRoute(up.URL)
	c.Shaping.Enabled, c.Capture.Enabled, c.Guard.Enabled = false, withCapture, false
	a, err := app.Build(c, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	px := httptest.NewServer(a.Proxy)
	defer px.Close()
	body := []byte(`{"model":"deepseek-reasoner","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]}`)
	for b.Loop() {
		resp, err := http.Post(px.URL+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}
