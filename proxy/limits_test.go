package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/sse"
	"github.com/tidwall/gjson"
)

// TestExpectContinueNotForwarded: the proxy has read the body (answering
// the client's 100-continue itself), so the upstream must not be asked to
// send a 100 first. (Before: the header went upstream and the transport
// waited a second for a 100 from an upstream that sends none.)
func TestExpectContinueNotForwarded(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	headers := make(chan http.Header, 1)
	go func() { // an upstream that never sends 100 Continue
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		req, err := http.ReadRequest(bufio.NewReader(c))
		if err != nil {
			return
		}
		headers <- req.Header
		_, _ = io.Copy(io.Discard, req.Body)
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
	}()
	_, px := newTestProxy(t, "http://"+ln.Addr().String(), nil)
	resp, body := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{"Expect": {"100-continue"}})
	if resp.StatusCode != 200 || string(body) != "{}" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if h := <-headers; h.Get("Expect") != "" {
		t.Fatalf("the upstream was sent Expect: %q", h.Get("Expect"))
	}
}

// TestHalfClosedClientGetsBadRequest: a client that sends part of its
// body and half-closes reads a 400, and the call is recorded as a bad
// request, not as a cancelled client. (Before: an empty 200, or a 400
// recorded as client_cancelled.)
func TestHalfClosedClientGetsBadRequest(t *testing.T) {
	// A short body, and one of several reads (keyed as they come) cut
	// in its third block.
	for _, c := range []struct {
		declared int
		sent     string
	}{
		{100, `{"model":`},
		{300_000, `{"model":"` + strings.Repeat("m", 40_000)},
	} {
		halfClosed(t, c.declared, c.sent)
	}
}

func halfClosed(t *testing.T, declared int, sent string) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("upstream reached") }))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s", declared, sent)
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status = %d, want 400", resp.StatusCode)
	}
	// The call is recorded just after the answer went out.
	var metrics []byte
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, metrics = do(t, rawClient(), "GET", px.URL+"/metrics", nil, nil); bytes.Contains(metrics, []byte(`method="POST"`)) {
			break
		}
	}
	if !bytes.Contains(metrics, []byte(`outcome="bad_request",route="default",status="400"} 1`)) {
		t.Fatalf("the 400 is not recorded as bad_request:\n%s", grepLines(metrics, "shaperproxy_requests_total"))
	}
}

func grepLines(b []byte, substr string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestSlowRequestBodyTimesOut: a client that stops sending its body is
// answered 408 once the client idle timeout passes, and its handler ends.
// (Before: no read deadline; the handler waited for ever.)
func TestSlowRequestBodyTimesOut(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("upstream reached") }))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.ClientIdleTimeout = 200 * time.Millisecond })
	c, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{\"model\":")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Fatalf("status = %d, want 408", resp.StatusCode)
	}
}

// TestClientThatStopsReadingIsCut: a client that stops reading while the
// upstream pours out a stream (and is then cut) leaves the proxy once the
// client idle timeout passes. (Before: no write deadline; the call stayed
// in flight for ever.)
func TestClientThatStopsReadingIsCut(t *testing.T) {
	upDone := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(upDone)
		w.Header().Set("Content-Type", "text/event-stream")
		ev := []byte("data: " + strings.Repeat("x", 64<<10) + "\n\n")
		for i := 0; i < 1024; i++ { // 64 MiB, far more than the socket buffers hold
			if _, err := w.Write(ev); err != nil {
				return
			}
		}
		panic(http.ErrAbortHandler) // then the upstream is cut
	}))
	defer up.Close()
	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.ClientIdleTimeout = 300 * time.Millisecond
		o.Observers = []Observer{obs}
	})
	c, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n%s", len(chatBody), chatBody)
	// The client reads nothing from here on.
	end := obs.waitEnd(t)
	if end.Outcome != OutcomeClientCancelled {
		t.Fatalf("outcome = %s, want client_cancelled", end.Outcome)
	}
	select {
	case <-upDone:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream request was not ended")
	}
}

// TestPausingStreamNotCut: a stream whose upstream pauses longer than the
// client idle timeout between events (a model thinking) still reaches the
// client whole: the deadline bounds each write, not the silence.
func TestPausingStreamNotCut(t *testing.T) {
	body := "data: {\"a\":1}\n\n: keep-alive\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		for _, ev := range strings.SplitAfter(body, "\n\n")[:3] {
			io.WriteString(w, ev)
			rc.Flush()
			time.Sleep(250 * time.Millisecond)
		}
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.ClientIdleTimeout = 100 * time.Millisecond })
	for i := 0; i < 2; i++ { // the second request reuses the connection
		resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
		if resp.StatusCode != 200 || string(got) != body {
			t.Fatalf("request %d: got %d %q", i, resp.StatusCode, got)
		}
	}
}

// TestUntrustedCertificateNamed: an upstream whose certificate the proxy
// does not trust is reported as a certificate problem on the route, and
// the route's own roots (ca_file) make it work. (Before: "connection
// failed", and no per-route CA.)
func TestUntrustedCertificateNamed(t *testing.T) {
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "{}") }))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Routes[0].Name = "private-llm" })
	resp, body := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	msg := gjson.GetBytes(body, "error.message").String()
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(msg, "certificate") || !strings.Contains(msg, `"private-llm"`) {
		t.Fatalf("untrusted upstream: %d %s", resp.StatusCode, body)
	}
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	_, px = newTestProxy(t, up.URL, func(o *Options) { o.Routes[0].RootCAs = pool })
	resp, body = do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	if resp.StatusCode != 200 || string(body) != "{}" {
		t.Fatalf("with the route's CA: %d %s", resp.StatusCode, body)
	}
}

// truncEvents returns the observer's events and a function that tells
// whether the observer saw event i truncated.
type truncObserver struct {
	recordingObserver
	truncated []bool
	sizes     []int64
}

func (o *truncObserver) Request(call *Call, up *Upstream) ResponseSink { return o }

func (o *truncObserver) Event(ev *sse.Event, seq int, at time.Duration) {
	o.mu.Lock()
	o.truncated = append(o.truncated, ev.Truncated)
	o.sizes = append(o.sizes, ev.Size)
	o.mu.Unlock()
	o.recordingObserver.Event(ev, seq, at)
}

// TestHugeEventPassesBounded: an event far over MaxEventBytes reaches the
// client byte for byte, the events around it keep their own flushes, and
// the observers get its beginning marked truncated with its size.
// (Before: the proxy held the whole event, and so did every observer.)
func TestHugeEventPassesBounded(t *testing.T) {
	big := "data: {\"x\":\"" + strings.Repeat("y", 8<<20) + "\"}\n\n"
	body := "data: {\"a\":1}\n\n" + big + "data: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, []byte(body))
	}))
	defer up.Close()
	obs := &truncObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers, o.MaxEventBytes = []Observer{obs}, 1<<20 })
	_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	if string(got) != body {
		t.Fatalf("client got %d bytes, want %d, byte for byte", len(got), len(body))
	}
	end := obs.waitEnd(t)
	if end.Events != 3 || len(obs.events) != 3 {
		t.Fatalf("events: end %d, observer %d", end.Events, len(obs.events))
	}
	if !obs.truncated[1] || obs.sizes[1] != int64(len(big)) || len(obs.events[1]) != 1<<20 || string(obs.events[1]) != big[:1<<20] {
		t.Fatalf("observer got %d bytes (truncated %v, size %d) of the big event", len(obs.events[1]), obs.truncated[1], obs.sizes[1])
	}
	if obs.truncated[0] || obs.truncated[2] || string(obs.events[2]) != "data: [DONE]\n\n" {
		t.Fatalf("the small events were not whole")
	}
}

// TestGzipBombSideCopyBounded: a compressed stream that decodes to one
// huge event reaches the client as sent; the decoded copy the observers
// get is bounded and marked truncated.
func TestGzipBombSideCopyBounded(t *testing.T) {
	const decoded = 64 << 20
	var zbuf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zbuf, gzip.BestCompression)
	zw.Write([]byte("data: "))
	chunk := bytes.Repeat([]byte("a"), 1<<20)
	for i := 0; i < decoded>>20; i++ {
		zw.Write(chunk)
	}
	zw.Write([]byte("\n\ndata: [DONE]\n\n"))
	zw.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Encoding", "gzip")
		w.Write(zbuf.Bytes())
	}))
	defer up.Close()
	obs := &truncObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers, o.MaxEventBytes = []Observer{obs}, 1<<20 })
	_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{"Accept-Encoding": {"gzip"}})
	if !bytes.Equal(got, zbuf.Bytes()) {
		t.Fatal("the client did not get the compressed bytes as sent")
	}
	end := obs.waitEnd(t)
	if end.Events != 2 || !obs.truncated[0] || obs.sizes[0] != decoded+8 || len(obs.events[0]) != 1<<20 {
		t.Fatalf("observer: %d events, first truncated %v size %d kept %d", end.Events, obs.truncated[0], obs.sizes[0], len(obs.events[0]))
	}
}

// TestNewlineFreeBodyPassesBounded: a stream that is one line with no
// newline at all reaches the client whole and ends as a partial event
// the observers see truncated.
func TestNewlineFreeBodyPassesBounded(t *testing.T) {
	const n = 16 << 20
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", fmt.Sprint(n))
		io.Copy(w, io.LimitReader(byteReader('z'), n))
	}))
	defer up.Close()
	obs := &truncObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Observers, o.MaxEventBytes = []Observer{obs}, 1<<20 })
	resp, err := rawClient().Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || got != n {
		t.Fatalf("client got %d bytes (%v), want %d", got, err, n)
	}
	obs.waitEnd(t)
	if len(obs.events) != 1 || !obs.truncated[0] || obs.sizes[0] != n || len(obs.events[0]) != 1<<20 {
		t.Fatalf("observer: %d events", len(obs.events))
	}
}

type byteReader byte

func (b byteReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

// holdAll is a finisher that holds every event from the first one on and
// records whether it was asked to end.
type holdAll struct{ ended chan struct{} }

func (f *holdAll) Start(*Call, *ResponseInfo) FinishSession { return f }
func (f *holdAll) Hold(*sse.Event) bool                     { return true }
func (f *holdAll) End(context.Context, [][]byte, *EventWriter) error {
	close(f.ended)
	return nil
}
func (f *holdAll) EndBody(_ context.Context, b []byte, _ KeepAlive) ([]byte, error) { return b, nil }

// TestHeldEventsBounded: a finish session that holds events gives way
// when they outgrow MaxEventBytes, or when an event too large to hold
// comes: what it held goes out first, in order, and it is not asked to
// end the stream.
func TestHeldEventsBounded(t *testing.T) {
	many := strings.Repeat("data: {\"choices\":[]}\n\n", 20000) // 440 KB
	huge := "data: " + strings.Repeat("h", 300<<10) + "\n\n"
	for name, body := range map[string]string{
		"many small": many + "data: [DONE]\n\n",
		"one huge":   "data: {\"a\":1}\n\n" + huge + "data: [DONE]\n\n",
	} {
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvents(w, []byte(body))
		}))
		fin := &holdAll{ended: make(chan struct{})}
		_, px := newTestProxy(t, up.URL, func(o *Options) { o.Finishers, o.MaxEventBytes = []Finisher{fin}, 256<<10 })
		_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
		up.Close()
		if string(got) != body {
			t.Fatalf("%s: client got %d bytes, want the %d the upstream sent", name, len(got), len(body))
		}
		select {
		case <-fin.ended:
			t.Fatalf("%s: the session was asked to end a stream it gave up", name)
		default:
		}
	}
}

// TestReadKeyed: reading a body keyed as it comes ends as io.ReadFull
// does — the whole buffer, a body cut short (io.ErrUnexpectedEOF, also
// from a reader that says only io.EOF), none at all (io.EOF), another
// error as it is — whatever the reads' lengths.
func TestReadKeyed(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789abcdef"), 20_000) // 320 KB: reads of 128 KiB, blocks keyed
	for _, c := range []struct {
		name string
		r    io.Reader
		want error
	}{
		{"whole", bytes.NewReader(body), nil},
		{"whole, a byte a read", iotest.OneByteReader(bytes.NewReader(body[:40_000])), nil},
		{"cut short", bytes.NewReader(body[:200_000]), io.ErrUnexpectedEOF},
		{"none", bytes.NewReader(nil), io.EOF},
		{"an error", iotest.TimeoutReader(bytes.NewReader(body)), iotest.ErrTimeout},
	} {
		n := len(body)
		if c.name == "whole, a byte a read" {
			n = 40_000
		}
		for _, fresh := range []bool{false, true} { // a fresh buffer's pages faulted in as it goes: the same bytes
			if fresh {
				if s, ok := c.r.(io.Seeker); ok {
					_, _ = s.Seek(0, io.SeekStart)
				} else {
					continue
				}
			}
			buf := make([]byte, n)
			var keys conv.BodyKeys
			if err := readKeyed(c.r, buf, &keys, fresh); err != c.want {
				t.Errorf("%s (fresh %v): %v, want %v", c.name, fresh, err, c.want)
			}
			if c.want == nil && !bytes.Equal(buf, body[:n]) {
				t.Errorf("%s (fresh %v): the bytes read differ", c.name, fresh)
			}
		}
	}
}

// TestOversizeBodyStreamsThrough: a body over MaxBodyBytes goes upstream
// as it comes, unread by the proxy: its first bytes reach the upstream
// while the client still holds back the rest, and the whole body arrives
// unchanged. (The cost section's streamed core relies on it.)
func TestOversizeBodyStreamsThrough(t *testing.T) {
	first, gotc := make(chan struct{}), make(chan []byte, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 1)
		if _, err := io.ReadFull(r.Body, buf); err == nil {
			close(first)
		}
		rest, _ := io.ReadAll(r.Body)
		gotc <- append(buf, rest...)
		fmt.Fprint(w, `{"ok":true}`)
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.MaxBodyBytes = 1024 })
	head := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 8<<10)
	tail := strings.Repeat("b", 8<<10) + `"}]}`
	pr, pw := io.Pipe()
	req, err := http.NewRequest("POST", px.URL+"/v1/chat/completions", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(len(head) + len(tail))
	done := make(chan error, 1)
	go func() {
		resp, err := rawClient().Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		done <- err
	}()
	if _, err := pw.Write([]byte(head)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first:
	case <-time.After(5 * time.Second):
		t.Fatal("the upstream got no byte of an oversize body while the client held back its end: the proxy read it whole")
	}
	if _, err := pw.Write([]byte(tail)); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := <-gotc; string(got) != head+tail {
		t.Fatalf("upstream got %d bytes, not the body's %d", len(got), len(head)+len(tail))
	}
}
