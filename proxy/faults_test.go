package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/internal/testenv"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

const chatBody = `{"model":"deepseek-reasoner","stream":true,"messages":[{"role":"user","content":"hi"}]}`

// TestFlushPerEvent: the upstream writes event k+1 only after the client
// has received event k. A proxy that buffers deadlocks and the test fails.
func TestFlushPerEvent(t *testing.T) {
	const n = 20
	got := make(chan int, n)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for k := 0; k < n; k++ {
			fmt.Fprintf(w, "data: {\"k\":%d}\n\n", k)
			_ = rc.Flush()
			select {
			case seen := <-got:
				if seen != k {
					t.Errorf("client saw %d, want %d", seen, k)
				}
			case <-time.After(3 * time.Second):
				t.Errorf("client did not receive event %d before the upstream wrote event %d", k, k+1)
				return
			}
		}
		fmt.Fprint(w, ": keep-alive\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	resp, err := rawClient().Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := sse.NewReader(resp.Body)
	var tail []byte
	for {
		ev, err := rd.Next()
		if err != nil {
			break
		}
		if k := gjson.GetBytes(ev.Data, "k"); k.Exists() {
			got <- int(k.Int())
		} else {
			tail = append(tail, ev.Raw...)
		}
	}
	if string(tail) != ": keep-alive\n\ndata: [DONE]\n\n" {
		t.Errorf("comment and [DONE] not passed through: %q", tail)
	}
}

func TestOneMegabyteLine(t *testing.T) {
	big := "data: {\"x\":\"" + strings.Repeat("y", 1<<20) + "\"}\n\n"
	body := big + "data: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, []byte(body))
	}))
	defer up.Close()
	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers = []Observer{obs} })
	_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	if string(got) != body {
		t.Fatalf("got %d bytes, want %d", len(got), len(body))
	}
	obs.waitEnd(t)
	if len(obs.events) != 2 || len(obs.events[0]) != len(big) {
		t.Fatalf("observer saw %d events", len(obs.events))
	}
}

// TestGzipUpstream: compressed bytes reach the client as sent; observers
// still see the decoded events.
func TestGzipUpstream(t *testing.T) {
	events := "data: {\"a\":1}\n\n: keep-alive\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n"
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	_, _ = zw.Write([]byte(events))
	_ = zw.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(zbuf.Bytes())
	}))
	defer up.Close()
	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers = []Observer{obs} })
	resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{"Accept-Encoding": {"gzip"}})
	if resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(got, zbuf.Bytes()) {
		t.Fatalf("client did not get the upstream's gzip bytes")
	}
	end := obs.waitEnd(t)
	if string(bytes.Join(obs.events, nil)) != events || end.Events != 4 {
		t.Fatalf("observer saw %q (%d events)", bytes.Join(obs.events, nil), end.Events)
	}
}

// TestClientCancelReachesUpstream: the upstream sees its request context
// end within 500 ms of the client going away.
func TestClientCancelReachesUpstream(t *testing.T) {
	gone := make(chan time.Time, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for {
			fmt.Fprint(w, "data: {\"x\":1}\n\n")
			_ = rc.Flush()
			select {
			case <-r.Context().Done():
				gone <- time.Now()
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	resp, cancel := openStream(t, rawClient(), px.URL+"/v1/chat/completions")
	cancelled := time.Now()
	cancel()
	resp.Body.Close()
	select {
	case at := <-gone:
		if d := at.Sub(cancelled); d > 500*time.Millisecond {
			t.Fatalf("upstream saw the cancel after %v", d)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("upstream never saw the client go away")
	}
}

// TestUpstreamCutMidStream: a cut upstream is passed on as the same cut:
// the client gets the events sent so far and then an error, never [DONE].
func TestUpstreamCutMidStream(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"a\"")
		_ = http.NewResponseController(w).Flush()
		panic(http.ErrAbortHandler)
	}))
	up.Config.ErrorLog = nil
	defer up.Close()
	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers = []Observer{obs} })
	resp, err := rawClient().Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil {
		t.Fatal("client read a clean end of a cut stream")
	}
	if !strings.HasPrefix(string(got), "data: {\"a\":1}\n\ndata: {\"a\":2}\n\n") || strings.Contains(string(got), "[DONE]") {
		t.Fatalf("client got %q", got)
	}
	if end := obs.waitEnd(t); end.Outcome != OutcomeUpstreamError {
		t.Fatalf("outcome = %s", end.Outcome)
	}
}

func TestUnreachableUpstream(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, px := newTestProxy(t, "http://"+addr+"/?key=sk-secret-in-query", func(o *Options) { o.Routes[0].APIKey = "sk-route-secret" })
	resp, body := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{"Authorization": {"Bearer sk-client-secret"}})
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("status = %d", resp.StatusCode)
	}
	if !gjson.GetBytes(body, "error.message").Exists() || gjson.GetBytes(body, "error.code").String() != "upstream_unreachable" {
		t.Fatalf("not the OpenAI error shape: %s", body)
	}
	if bytes.Contains(body, []byte("secret")) || bytes.Contains(body, []byte(addr)) {
		t.Fatalf("error names a secret or the upstream address: %s", body)
	}
}

func TestResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	defer close(release)
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.ResponseHeaderTimeout = 100 * time.Millisecond })
	resp, body := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	if resp.StatusCode != http.StatusGatewayTimeout || gjson.GetBytes(body, "error.code").String() != "upstream_timeout" {
		t.Fatalf("got %d %s", resp.StatusCode, body)
	}
}

// TestStreamIdleTimeout: an upstream that goes quiet mid-stream is cut
// after the idle timeout: the client gets the events sent, then a cut
// stream; the observers an OutcomeTimeout; the upstream its request
// cancelled (the proxy closes the body: over HTTP/1 the connection
// closes, over HTTP/2 the stream is reset).
func TestStreamIdleTimeout(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		released := make(chan int, 1)
		up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "data: {\"a\":1}\n\n")
			_ = http.NewResponseController(w).Flush()
			<-r.Context().Done()
			released <- r.ProtoMajor
		}))
		up.EnableHTTP2 = h2
		up.StartTLS()
		t.Cleanup(up.Close)
		obs := &recordingObserver{}
		_, px := newTestProxy(t, up.URL, func(o *Options) {
			o.StreamIdleTimeout = 150 * time.Millisecond
			o.Observers = []Observer{obs}
			o.Transport = up.Client().Transport
		})
		resp, err := rawClient().Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil || string(got) != "data: {\"a\":1}\n\n" {
			t.Fatalf("h2 %v: got %q, err %v; want the first event then a cut", h2, got, err)
		}
		if end := obs.waitEnd(t); end.Outcome != OutcomeTimeout || end.Err != errIdle.Error() {
			t.Fatalf("h2 %v: outcome %s (%s)", h2, end.Outcome, end.Err)
		}
		select {
		case proto := <-released:
			if want := map[bool]int{false: 1, true: 2}[h2]; proto != want {
				t.Fatalf("upstream spoke HTTP/%d, want HTTP/%d", proto, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("h2 %v: the upstream's request was not cancelled", h2)
		}
	}
}

// TestNonChatPaths: models, embeddings, Responses and Anthropic Messages
// pass through with method, path, query and body intact, and no transform
// sees them.
func TestNonChatPaths(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec.wrap(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Echo-Path", r.URL.Path)
		_, _ = io.Copy(w, r.Body)
	}))
	defer up.Close()
	called := 0
	_, px := newTestProxy(t, up.URL+"/base", func(o *Options) {
		o.Transforms = []RequestTransform{RequestTransformFunc(func(ctx context.Context, c *Call, b []byte) ([]byte, error) {
			called++
			return b, nil
		})}
	})
	cases := []struct{ method, path, body string }{
		{"GET", "/v1/models?limit=2", ""},
		{"POST", "/v1/embeddings", `{"input":"x","model":"e"}`},
		{"POST", "/v1/responses", `{"input":"x","model":"m","stream":false}`},
		{"POST", "/v1/messages?beta=true", `{"messages":[{"role":"user","content":"x"}],"model":"claude"}`},
		{"DELETE", "/v1/files/abc%2Fdef", ""},
	}
	for _, tc := range cases {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		resp, got := do(t, rawClient(), tc.method, px.URL+tc.path, body, nil)
		r := rec.last(t)
		wantPath, wantQuery, _ := strings.Cut(tc.path, "?")
		if u, _ := url.Parse(px.URL + tc.path); u != nil {
			wantPath = "/base" + u.Path
		}
		if r.Method != tc.method || r.Path != wantPath || r.RawQuery != wantQuery || string(r.Body) != tc.body {
			t.Errorf("%s %s: upstream got %s %s?%s %q", tc.method, tc.path, r.Method, r.Path, r.RawQuery, r.Body)
		}
		if resp.StatusCode != 200 || string(got) != tc.body {
			t.Errorf("%s %s: client got %d %q", tc.method, tc.path, resp.StatusCode, got)
		}
	}
	if called != 0 {
		t.Errorf("a transform saw %d non-chat requests", called)
	}
}

// TestConnectTunnelNotDecrypted: CONNECT to a host of the tunnel list,
// not listed in Intercept, is tunnelled: the client sees the upstream's
// own certificate.
func TestConnectTunnelNotDecrypted(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "direct")
	}))
	defer up.Close()
	ca := testCA(t)
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Intercept, o.CA, o.Tunnel = []string{"api.deepseek.com"}, ca, []string{"127.0.0.1"}
	})
	pxURL, _ := url.Parse(px.URL)
	tr := up.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(pxURL)
	resp, body := do(t, &http.Client{Transport: tr}, "GET", up.URL+"/x", nil, nil)
	if string(body) != "direct" || resp.TLS.PeerCertificates[0].Issuer.CommonName == ca.Leaf.Subject.CommonName {
		t.Fatalf("tunnel was decrypted or failed: %q", body)
	}
}

// TestInvalidBodiesForwardedUntouched: bodies the proxy cannot make sense
// of, and bodies over the size limit, go upstream as they are; the
// transforms never see them.
func TestInvalidBodiesForwardedUntouched(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec.wrap(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.WriteHeader(400)
		fmt.Fprint(w, `{"error":{"message":"Failed to deserialize the JSON body"}}`)
	}))
	defer up.Close()
	seen := 0
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.MaxBodyBytes = 1024
		o.Transforms = []RequestTransform{RequestTransformFunc(func(ctx context.Context, c *Call, b []byte) ([]byte, error) {
			seen++
			return append([]byte(nil), b...), nil
		})}
	})
	bodies := []string{
		`{"model":"x","messages":[{"role":"user","content":"unterminated`,
		`not json at all`,
		`{"model":"x","messages":"not an array"}`,
		`{"model":"x","messages":[{"role":"user","content":"` + strings.Repeat("z", 4096) + `"}]}`,
	}
	for _, b := range bodies {
		resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(b), nil)
		if string(rec.last(t).Body) != b {
			t.Errorf("upstream got a different body for %.30q", b)
		}
		if resp.StatusCode != 400 || !strings.Contains(string(got), "deserialize") {
			t.Errorf("client did not get the upstream's own answer: %d %s", resp.StatusCode, got)
		}
	}
	if seen != 0 {
		t.Errorf("transforms saw %d unparseable or oversize bodies", seen)
	}
}

// TestTransforms: a transform's body goes upstream with a correct
// Content-Length; a failing or panicking transform is skipped.
func TestTransforms(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec.wrap(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms = []RequestTransform{
			RequestTransformFunc(func(ctx context.Context, c *Call, b []byte) ([]byte, error) {
				if c.View == nil || c.Conversation == "" || c.Model != "m" {
					return nil, errors.New("no view")
				}
				return bytes.Replace(b, []byte(`"hi"`), []byte(`"hello"`), 1), nil
			}),
			RequestTransformFunc(func(ctx context.Context, c *Call, b []byte) ([]byte, error) {
				return nil, errors.New("boom")
			}),
			RequestTransformFunc(func(ctx context.Context, c *Call, b []byte) ([]byte, error) {
				panic("kaboom")
			}),
		}
	})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, _ := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(body), nil)
	got := rec.last(t)
	want := strings.Replace(body, `"hi"`, `"hello"`, 1)
	if resp.StatusCode != 200 || string(got.Body) != want || got.Header.Get("Content-Length") != fmt.Sprint(len(want)) {
		t.Fatalf("upstream got %q (Content-Length %s)", got.Body, got.Header.Get("Content-Length"))
	}
}

// TestHealthzAndMetrics checks the admin endpoints on the main listener.
func TestHealthzAndMetrics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {}\n\ndata: [DONE]\n\n")
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	if resp, body := do(t, rawClient(), "GET", px.URL+"/healthz", nil, nil); resp.StatusCode != 200 || string(body) != "ok\n" {
		t.Fatalf("healthz: %d %q", resp.StatusCode, body)
	}
	// The call is counted when the handler returns, which may be just
	// after the client read the last byte: wait for it.
	wants := []string{`shaperproxy_requests_total{method="POST",model="deepseek-reasoner",outcome="complete",route="default",status="200"} 1`, "shaperproxy_stream_events_total 2", "shaperproxy_request_duration_seconds_bucket"}
	var body []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, body = do(t, rawClient(), "GET", px.URL+"/metrics", nil, nil); containsAll(string(body), wants) {
			break
		}
	}
	for _, want := range wants {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// TestOwnHeadersNotForwarded: X-Shaper-* headers are for the proxy.
func TestOwnHeadersNotForwarded(t *testing.T) {
	rec := &recorder{}
	up := httptest.NewServer(rec.wrap(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{
		"X-Shaper-Conversation": {"abc"}, "X-Shaper-Review": {"off"}, "X-Other": {"kept"},
	})
	h := rec.last(t).Header
	if h.Get("X-Shaper-Conversation") != "" || h.Get("X-Shaper-Review") != "" || h.Get("X-Other") != "kept" {
		t.Fatalf("upstream headers: %v", h)
	}
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

// panicSink is an observer whose sink panics on its second event.
type panicSink struct{ n int }

func (o *panicSink) Request(*Call, *Upstream) ResponseSink { return o }
func (o *panicSink) Response(*ResponseInfo)                {}
func (o *panicSink) Body([]byte)                           {}
func (o *panicSink) End(End)                               {}
func (o *panicSink) Event(*sse.Event, int, time.Duration) {
	if o.n++; o.n == 2 {
		panic("observer bug")
	}
}

// TestPanickingObserver: an observer that panics, plain or on the
// decoder goroutine of a compressed stream, is logged and left out; the
// client gets the whole answer, the other observers every event, and the
// process lives.
func TestPanickingObserver(t *testing.T) {
	events := "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"a\":3}\n\ndata: [DONE]\n\n"
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	_, _ = zw.Write([]byte(events))
	_ = zw.Close()
	for _, gz := range []bool{false, true} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			if gz {
				w.Header().Set("Content-Encoding", "gzip")
				_, _ = w.Write(zbuf.Bytes())
				return
			}
			_, _ = io.WriteString(w, events)
		}))
		obs, rec := &recordingObserver{}, &testenv.Log{}
		_, px := newTestProxy(t, up.URL, func(o *Options) {
			o.Observers = []Observer{&panicSink{}, obs}
			o.Logger = slog.New(rec)
		})
		_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{"Accept-Encoding": {"gzip"}})
		want := events
		if gz {
			want = zbuf.String()
		}
		if string(got) != want {
			t.Errorf("gzip %v: client got %q", gz, got)
		}
		obs.waitEnd(t)
		if n := len(obs.events); n != 4 {
			t.Errorf("gzip %v: the other observer saw %d events, want 4", gz, n)
		}
		if rec.Count("an observer failed") != 1 {
			t.Errorf("gzip %v: the failure was not logged once: %q", gz, rec.Rendered())
		}
		up.Close()
	}
}

// TestIdleTimeoutNonStreamBody: over plain HTTP (the proxy's own
// transport), a non-stream answer whose body came whole with its header
// is read without the idle timer, and one whose body is still to come is
// cut by it when the upstream goes quiet.
func TestIdleTimeoutNonStreamBody(t *testing.T) {
	released := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("quiet") == "" {
			_, _ = io.WriteString(w, `{"ok":true}`)
			return
		}
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, `{"ok":`)
		_ = http.NewResponseController(w).Flush()
		<-r.Context().Done()
		released <- struct{}{}
	}))
	t.Cleanup(up.Close)
	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.StreamIdleTimeout = 150 * time.Millisecond
		o.Observers = []Observer{obs}
	})
	resp, body := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	if resp.StatusCode != http.StatusOK || string(body) != `{"ok":true}` {
		t.Fatalf("whole answer: %d %q", resp.StatusCode, body)
	}
	if end := obs.waitEnd(t); end.Outcome != OutcomeComplete {
		t.Fatalf("whole answer: outcome %s (%s)", end.Outcome, end.Err)
	}
	resp2, err := rawClient().Post(px.URL+"/v1/chat/completions?quiet=1", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	inTime(t, func() { got, err = io.ReadAll(resp2.Body) })
	resp2.Body.Close()
	if err == nil || string(got) != `{"ok":` {
		t.Fatalf("quiet answer: got %q, err %v; want its beginning then a cut", got, err)
	}
	if end := obs.waitEnds(t, 2)[1]; end.Outcome != OutcomeTimeout || end.Err != errIdle.Error() {
		t.Fatalf("quiet answer: outcome %s (%s)", end.Outcome, end.Err)
	}
	select {
	case <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream's request was not cancelled")
	}
}
