package proxy

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"testing"
)

// BenchmarkRoundTrip measures one small non-stream chat request through
// the proxy (b.N requests, sequential), against BenchmarkRoundTripDirect.
func BenchmarkRoundTrip(b *testing.B) { benchRoundTrip(b, true) }

// BenchmarkRoundTripDirect is the same request straight to the upstream.
func BenchmarkRoundTripDirect(b *testing.B) { benchRoundTrip(b, false) }

// BenchmarkRoundTripStdlib is the same request through the standard
// library's httputil.ReverseProxy (flushing every write): the floor a Go
// proxy starts from.
func BenchmarkRoundTripStdlib(b *testing.B) { benchRoundTripVia(b, "stdlib") }

func benchRoundTrip(b *testing.B, viaProxy bool) {
	via := "direct"
	if viaProxy {
		via = "proxy"
	}
	benchRoundTripVia(b, via)
}

func benchRoundTripVia(b *testing.B, via string) {
	resp := []byte(`{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"ok","reasoning_content":"short"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}`)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(resp)
	}))
	defer up.Close()
	url := up.URL
	switch via {
	case "proxy":
		_, px := newTestProxy(b, up.URL, nil)
		url = px.URL
	case "stdlib":
		u, _ := neturl.Parse(up.URL)
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.FlushInterval = -1
		px := httptest.NewServer(rp)
		defer px.Close()
		url = px.URL
	}
	c := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 8}}
	body := []byte(`{"model":"deepseek-reasoner","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hello"}]}`)
	b.ResetTimer()
	for b.Loop() {
		r, err := c.Post(url+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
}
