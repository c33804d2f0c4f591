package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestFinisherChain: with two finishers, the first that writes the end
// wins and the second is not asked; when the first writes nothing, the
// second ends the stream.
func TestFinisherChain(t *testing.T) {
	for _, firstWrites := range []bool{true, false} {
		first := &testFinisher{replace: firstWrites}
		second := &testFinisher{replace: true}
		second.started = make(chan struct{})
		rec := &recorder{}
		up := newChainUpstream(t, rec)
		_, px := newTestProxy(t, up, func(o *Options) { o.Finishers = []Finisher{first, second} })
		_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
		s := string(got)
		if n := strings.Count(s, `"revised"`); n != 1 {
			t.Fatalf("firstWrites=%v: %d replacements in %q", firstWrites, n, s)
		}
		asked := false
		select {
		case <-second.started:
			asked = true
		default:
		}
		if asked == firstWrites {
			t.Errorf("firstWrites=%v: second finisher asked = %v", firstWrites, asked)
		}
	}
}

func newChainUpstream(t *testing.T, rec *recorder) string {
	return httpServer(t, rec.wrap(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(string(rec.last(t).Body), "child") {
			w.Write([]byte(`{"child":1}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, []byte("data: {\"a\":1}\n\ndata: {\"finish\":\"stop\"}\n\ndata: [DONE]\n\n"))
	}))
}

// httpServer starts h on loopback for the test.
func httpServer(t *testing.T, h http.HandlerFunc) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestReadsResponse: a transform that must read the answer gets it
// uncompressed (the client's Accept-Encoding is not forwarded); other
// requests keep it.
func TestReadsResponse(t *testing.T) {
	rec := &recorder{}
	up := httpServer(t, rec.wrap(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true}`))
	}))
	reads := false
	_, px := newTestProxy(t, up, func(o *Options) {
		o.Transforms = []RequestTransform{RequestTransformFunc(func(_ context.Context, c *Call, b []byte) ([]byte, error) {
			c.ReadsResponse = reads
			return b, nil
		})}
	})
	for _, r := range []bool{false, true} {
		reads = r
		do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{"Accept-Encoding": {"gzip"}})
		if got := rec.last(t).Header.Get("Accept-Encoding"); (got == "") != r {
			t.Errorf("ReadsResponse=%v: upstream got Accept-Encoding %q", r, got)
		}
	}
}
