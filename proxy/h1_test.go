package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// rawUpstream is an upstream on a real socket whose every connection is
// served by serve, so a test says byte for byte what the upstream does.
type rawUpstream struct {
	ln       net.Listener
	conns    atomic.Int64  // accepted
	requests atomic.Int64  // read by readRequest
	closed   chan struct{} // one value per connection the upstream saw end
	wg       sync.WaitGroup
	mu       sync.Mutex
	open     []net.Conn
}

func newRawUpstream(t *testing.T, serve func(u *rawUpstream, c net.Conn, br *bufio.Reader, n int64)) *rawUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &rawUpstream{ln: ln, closed: make(chan struct{}, 1024)}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := u.conns.Add(1)
			u.mu.Lock()
			u.open = append(u.open, c)
			u.mu.Unlock()
			u.wg.Add(1)
			go func() {
				defer u.wg.Done()
				defer func() { u.closed <- struct{}{} }()
				defer c.Close()
				serve(u, c, bufio.NewReader(c), n)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		u.mu.Lock()
		for _, c := range u.open {
			c.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return u
}

func (u *rawUpstream) url() string { return "http://" + u.ln.Addr().String() }

// awaitClose waits up to 5 s for one of the upstream's connections to end.
func (u *rawUpstream) awaitClose(t *testing.T, failure string) {
	t.Helper()
	select {
	case <-u.closed:
	case <-time.After(5 * time.Second):
		t.Fatal(failure)
	}
}

// nothingKept fails unless tr keeps no connection and its idle timer is off.
func nothingKept(t *testing.T, tr *h1Transport) {
	t.Helper()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.nIdle != 0 || tr.sweep != nil {
		t.Fatalf("kept %d connections, timer %v; want none and no timer", tr.nIdle, tr.sweep)
	}
}

// readRequest reads one request and its body; false at the connection's end.
func (u *rawUpstream) readRequest(br *bufio.Reader) (*http.Request, bool) {
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	_, _ = io.Copy(io.Discard, r.Body)
	u.requests.Add(1)
	return r, true
}

const okAnswer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"

// keepAnswering answers every request on the connection with answer.
func keepAnswering(answer string) func(*rawUpstream, net.Conn, *bufio.Reader, int64) {
	return func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		for {
			if _, ok := u.readRequest(br); !ok {
				return
			}
			if _, err := io.WriteString(c, answer); err != nil {
				return
			}
		}
	}
}

// testH1 is the h1Transport as the proxy makes it, with a fallback that
// records what it was given.
func testH1(t *testing.T, headerTimeout, idleTimeout time.Duration, maxIdle int) (*h1Transport, *atomic.Int64) {
	t.Helper()
	if !idleCheckWorks {
		t.Skip("no idle-connection check on this platform: plain HTTP goes through http.Transport")
	}
	var d net.Dialer
	return testH1Dial(t, d.DialContext, headerTimeout, idleTimeout, maxIdle)
}

// testH1Dial is testH1 dialing with dial.
func testH1Dial(t *testing.T, dial func(context.Context, string, string) (net.Conn, error), headerTimeout, idleTimeout time.Duration, maxIdle int) (*h1Transport, *atomic.Int64) {
	t.Helper()
	if !idleCheckWorks {
		t.Skip("no idle-connection check on this platform: plain HTTP goes through http.Transport")
	}
	var fell atomic.Int64
	next := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		fell.Add(1)
		return nil, errors.New("fallback")
	})
	return newH1Transport(next, dial, headerTimeout, idleTimeout, maxIdle, 4*maxIdle), &fell
}

// smallBuffers fixes a connection's socket buffers at 128 KiB (which
// also turns their autotuning off), so that largeBody does not fit in
// them on any host, however its tcp_wmem and tcp_rmem are tuned.
func smallBuffers(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(128 << 10)
		_ = tc.SetReadBuffer(128 << 10)
	}
}

// dialSmall dials with smallBuffers.
func dialSmall(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err == nil {
		smallBuffers(c)
	}
	return c, err
}

// within is the test's context, bounded: a transport that hangs fails
// the test instead of stalling it.
func within(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// inTime runs f and fails the test when it has not returned within 5 s
// (f is left running).
func inTime(t *testing.T, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting after 5s")
	}
}

// firstEvent posts to a stream and reads its first six bytes ("data:1").
func firstEvent(t *testing.T, tr http.RoundTripper, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := post(within(t), tr, url)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	return resp, buf
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// post sends a chat-like POST with a body that can be sent again, as the
// proxy's are.
func post(ctx context.Context, rt http.RoundTripper, url string) (*http.Response, error) {
	body := []byte(`{"model":"m","messages":[]}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	return rt.RoundTrip(req)
}

func getModels(ctx context.Context, rt http.RoundTripper, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/models", nil)
	if err != nil {
		return nil, err
	}
	return rt.RoundTrip(req)
}

// bodyOf returns a function that reads a response whole, failing t.
func bodyOf(t *testing.T) func(*http.Response, error) string {
	return func(resp *http.Response, err error) string {
		t.Helper()
		return readWhole(t, resp, err)
	}
}

func readWhole(t *testing.T, resp *http.Response, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestH1ReusesOneConnection(t *testing.T) {
	up := newRawUpstream(t, keepAnswering(okAnswer))
	tr, fell := testH1(t, 0, time.Minute, 4)
	for range 20 {
		if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
			t.Fatalf("body %q", got)
		}
	}
	if up.conns.Load() != 1 || up.requests.Load() != 20 || fell.Load() != 0 {
		t.Fatalf("connections %d, requests %d, fallbacks %d; want 1, 20, 0", up.conns.Load(), up.requests.Load(), fell.Load())
	}
}

// The proxy's default transport for a plain-HTTP upstream is the
// h1Transport: twenty calls through the proxy, one upstream connection.
func TestProxyDefaultTransportIsH1(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	p, px := newTestProxy(t, up.URL, nil)
	if _, ok := p.transport.(*h1Transport); !ok {
		t.Fatalf("default transport is %T", p.transport)
	}
	for range 20 {
		resp, body := do(t, &http.Client{}, http.MethodPost, px.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
		if resp.StatusCode != 200 || string(body) != `{"choices":[]}` {
			t.Fatalf("status %d body %q", resp.StatusCode, body)
		}
	}
	if conns.Load() != 1 {
		t.Fatalf("upstream connections: %d, want 1", conns.Load())
	}
}

// An upstream that closes a kept connection while it is idle (its own
// idle timeout, a restart): the next POST goes out on a new connection
// and succeeds, sent once.
func TestH1IdleConnectionClosedByUpstream(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		if _, ok := u.readRequest(br); ok {
			_, _ = io.WriteString(c, okAnswer) // then closes, saying nothing
		}
	})
	tr, _ := testH1(t, 0, time.Minute, 4)
	for i := range 3 {
		if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
			t.Fatalf("request %d: body %q", i, got)
		}
		<-up.closed // the upstream has closed it before the next request
	}
	if up.conns.Load() != 3 || up.requests.Load() != 3 {
		t.Fatalf("connections %d, requests %d; want 3, 3", up.conns.Load(), up.requests.Load())
	}
}

// A POST that reached the upstream is never sent again, whatever happens
// to its connection after: a chat request costs the user's key. A GET
// that got no answer at all on a reused connection is sent again on a
// new one, as http.Transport does.
func TestH1ResendOnlyWhatIsReplayable(t *testing.T) {
	for _, tc := range []struct {
		method       string
		wantErr      bool
		wantRequests int64
	}{
		{http.MethodPost, true, 2},
		{http.MethodGet, false, 3},
	} {
		t.Run(tc.method, func(t *testing.T) {
			up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, n int64) {
				for i := 0; ; i++ {
					if _, ok := u.readRequest(br); !ok {
						return
					}
					if n == 1 && i == 1 {
						return // reads the second request, then drops the connection unanswered
					}
					_, _ = io.WriteString(c, okAnswer)
				}
			})
			tr, _ := testH1(t, 0, time.Minute, 4)
			send := post
			if tc.method == http.MethodGet {
				send = getModels
			}
			bodyOf(t)(send(within(t), tr, up.url()))
			resp, err := send(within(t), tr, up.url())
			if tc.wantErr != (err != nil) {
				t.Fatalf("error %v, want error: %v", err, tc.wantErr)
			}
			if err == nil {
				bodyOf(t)(resp, nil)
			}
			if got := up.requests.Load(); got != tc.wantRequests {
				t.Fatalf("the upstream read %d requests, want %d", got, tc.wantRequests)
			}
		})
	}
}

func TestH1HeaderTimeout(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		u.readRequest(br)
		<-hold
	})
	tr, _ := testH1(t, 100*time.Millisecond, time.Minute, 4)
	start := time.Now()
	_, err := post(within(t), tr, up.url())
	if err == nil || !isTimeout(err) || !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Fatalf("err %v: want a timeout awaiting the header", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v", d)
	}
}

// A header without end is an error once it passes the bound, not a
// growing buffer.
func TestH1HeaderBounded(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		u.readRequest(br)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nX-Long: ")
		chunk := bytes.Repeat([]byte("a"), 64<<10)
		for range 64 { // 4 MiB, past the 1 MiB bound
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	})
	tr, _ := testH1(t, 0, time.Minute, 4)
	_, err := post(within(t), tr, up.url())
	if !errors.Is(err, errHeaderTooLong) {
		t.Fatalf("err %v, want %v", err, errHeaderTooLong)
	}
}

func TestH1Informational(t *testing.T) {
	for _, tc := range []struct {
		name, before string
		want         error
	}{
		{"early hints then the answer", "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n", nil},
		{"too many", strings.Repeat("HTTP/1.1 100 Continue\r\n\r\n", max1xx+1), errToo1xx},
		{"switching protocols unasked", "HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n", errUnexpected101},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUpstream(t, keepAnswering(tc.before+okAnswer))
			tr, _ := testH1(t, 0, time.Minute, 4)
			resp, err := post(within(t), tr, up.url())
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err %v, want %v", err, tc.want)
				}
				return
			}
			if got := bodyOf(t)(resp, err); resp.StatusCode != 200 || got != "{}" {
				t.Fatalf("status %d body %q", resp.StatusCode, got)
			}
		})
	}
}

// A client that leaves while the upstream has not answered ends the
// round trip at once, and the connection with it (the upstream sees it
// close, so a generation it started can stop).
func TestH1CancelWhileWaiting(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		u.readRequest(br)
		_, _ = br.ReadByte() // returns when the proxy closes the connection
	})
	tr, _ := testH1(t, 0, time.Minute, 4)
	ctx, cancel := context.WithCancel(within(t))
	time.AfterFunc(100*time.Millisecond, cancel)
	var err error
	inTime(t, func() { _, err = post(ctx, tr, up.url()) })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	up.awaitClose(t, "the upstream connection stayed open")
}

// A stream whose body is closed from another goroutine (the proxy's idle
// timer) while a read waits: the read returns, the connection is closed,
// and the next request gets a new one.
func TestH1CloseWhileReading(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, n int64) {
		for {
			if _, ok := u.readRequest(br); !ok {
				return
			}
			if n == 1 {
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata:1\r\n")
				continue // and sends nothing more
			}
			_, _ = io.WriteString(c, okAnswer)
		}
	})
	tr, _ := testH1(t, 0, time.Minute, 4)
	resp, buf := firstEvent(t, tr, up.url())
	var err error
	time.AfterFunc(100*time.Millisecond, func() { resp.Body.Close() })
	inTime(t, func() { _, err = resp.Body.Read(buf) })
	if err == nil {
		t.Fatal("read after close returned no error")
	}
	if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" || up.conns.Load() != 2 {
		t.Fatalf("body %q on connection %d, want a second connection", got, up.conns.Load())
	}
}

// The connection goes back only after a whole answer that did not ask
// to close it, and with nothing after it; else each request gets a new one.
func TestH1WhenAConnectionIsNotKept(t *testing.T) {
	for _, tc := range []struct{ name, answer string }{
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"},
		{"bytes after the answer", okAnswer + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nxx"},
		{"http/1.0 to the end", "HTTP/1.0 200 OK\r\n\r\n{}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
				if _, ok := u.readRequest(br); ok {
					_, _ = io.WriteString(c, tc.answer)
				}
				if strings.HasPrefix(tc.answer, "HTTP/1.0") {
					return
				}
				_, _ = br.ReadByte() // holds the connection open until the proxy closes it
			})
			tr, _ := testH1(t, 0, time.Minute, 4)
			for i := range 3 {
				if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
					t.Fatalf("request %d: body %q", i, got)
				}
			}
			if up.conns.Load() != 3 {
				t.Fatalf("connections %d, want 3", up.conns.Load())
			}
		})
	}
}

// Idle connections are kept within the per-host bound and dropped after
// the idle timeout.
func TestH1IdleBounds(t *testing.T) {
	up := newRawUpstream(t, keepAnswering(okAnswer))
	tr, _ := testH1(t, 0, 200*time.Millisecond, 2)
	var wg sync.WaitGroup
	hold := make(chan struct{})
	resps := make(chan *http.Response, 5)
	for range 5 { // five at once: five connections
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := post(within(t), tr, up.url())
			if err != nil {
				t.Error(err)
				return
			}
			resps <- resp
		}()
	}
	wg.Wait()
	close(hold)
	close(resps)
	for resp := range resps {
		bodyOf(t)(resp, nil)
	}
	if up.conns.Load() != 5 {
		t.Fatalf("connections %d, want 5", up.conns.Load())
	}
	for range 3 { // three over the bound are closed
		up.awaitClose(t, "connections over the idle bound stayed open")
	}
	tr.mu.Lock()
	kept := tr.nIdle
	tr.mu.Unlock()
	if kept != 2 {
		t.Fatalf("idle connections kept: %d, want 2", kept)
	}
	bodyOf(t)(post(within(t), tr, up.url())) // within the idle timeout: one of the two
	if up.conns.Load() != 5 {
		t.Fatalf("connections %d after a request within the idle timeout, want 5", up.conns.Load())
	}
	time.Sleep(300 * time.Millisecond)
	bodyOf(t)(post(within(t), tr, up.url()))
	if up.conns.Load() != 6 {
		t.Fatalf("connections %d after the idle timeout, want 6", up.conns.Load())
	}
}

// What it does not send itself goes to the next transport: https and a
// body that could not be sent again.
func TestH1FallsBack(t *testing.T) {
	tr, fell := testH1(t, 0, time.Minute, 4)
	req, _ := http.NewRequest(http.MethodPost, "https://127.0.0.1:1/v1/chat/completions", strings.NewReader("{}"))
	_, _ = tr.RoundTrip(req)
	req, _ = http.NewRequest(http.MethodPost, "http://127.0.0.1:1/v1/chat/completions", io.NopCloser(strings.NewReader("{}")))
	req.GetBody = nil
	_, _ = tr.RoundTrip(req)
	if fell.Load() != 2 {
		t.Fatalf("fallbacks %d, want 2", fell.Load())
	}
}

// postBody posts body (sendable again, as the proxy's are).
func postBody(ctx context.Context, rt http.RoundTripper, url string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	return rt.RoundTrip(req)
}

// largeBody is a body far over maxInlineBody and over what the loopback's
// socket buffers take before the upstream reads.
func largeBody() []byte {
	b := bytes.Repeat([]byte("0123456789abcdef"), 1<<20) // 16 MiB
	b[0], b[len(b)-1] = '[', ']'
	return b
}

// A large body goes out whole over a kept connection, the same one for
// the next request, and reaches the upstream byte for byte, in far fewer
// write calls than a 32 KiB copy makes.
func TestH1LargeBody(t *testing.T) {
	body := largeBody()
	var got atomic.Int64 // requests whose body arrived whole
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		for {
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return
			}
			if bytes.Equal(b, body) {
				got.Add(1)
			}
			if _, err := io.WriteString(c, okAnswer); err != nil {
				return
			}
		}
	})
	var writes atomic.Int64
	var d net.Dialer
	dial := func(ctx context.Context, n, a string) (net.Conn, error) {
		c, err := d.DialContext(ctx, n, a)
		return &countWrites{Conn: c, n: &writes}, err
	}
	testH1(t, 0, time.Minute, 1) // skips where the transport is not used
	tr := newH1Transport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		return nil, errors.New("fell back")
	}), dial, time.Minute, time.Minute, 4, 16)
	before := watches.size() // the wheel is the process's: another test's request may be on it
	for range 3 {
		if s := bodyOf(t)(postBody(within(t), tr, up.url(), body)); s != "{}" {
			t.Fatalf("answer %q", s)
		}
	}
	if got.Load() != 3 || up.conns.Load() != 1 {
		t.Fatalf("bodies arrived whole %d of 3, connections %d (want 1)", got.Load(), up.conns.Load())
	}
	if n := watches.size(); n > before {
		t.Fatalf("%d watches on the wheel after the writes returned, %d before", n, before) // writeWatch.stop takes its own off
	}
	// Written in the caller's goroutine, none of them cut: the upstream
	// reads each body whole before it answers.
	if in, cut := tr.largeInline.Load(), tr.largeCut.Load(); in != 3 || cut != 0 {
		t.Fatalf("%d of 3 large bodies written inline, %d cut (want 3, 0)", in, cut)
	}
	// Two write calls a request (the header with the body's first bytes,
	// then the rest), where a 32 KiB copy makes 512.
	if n := writes.Load(); n > 3*4 {
		t.Fatalf("%d write calls for 3 requests of 16 MiB", n)
	}
}

// countWrites counts the write calls on a connection.
type countWrites struct {
	net.Conn
	n *atomic.Int64
}

func (c *countWrites) Write(p []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(p)
}

// SyscallConn is the connection's own: the transport checks it idle.
func (c *countWrites) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// An upstream that answers a large body early (a 413) without reading
// it and without closing: the answer comes through at once, as from
// http.Transport, where a transport that writes the whole body before it
// reads waits for ever; and the connection, its body half sent, is closed
// instead of kept.
func TestH1LargeBodyAnsweredEarly(t *testing.T) {
	tr, _ := testH1Dial(t, dialSmall, 0, time.Minute, 4)
	read := make(chan struct{})
	readNow := sync.OnceFunc(func() { close(read) })
	defer readNow() // a failed test still lets the upstream end
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		smallBuffers(c)
		if _, err := http.ReadRequest(br); err != nil { // the header only: the body is not read
			return
		}
		u.requests.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"error\":\"big\"}")
		<-read
		// Read what came: it ends only if the transport closed the
		// connection (a kept one would leave this read waiting).
		_, _ = io.Copy(io.Discard, br)
	})
	inTime(t, func() {
		resp, err := postBody(within(t), tr, up.url(), largeBody())
		if got := readWhole(t, resp, err); resp.StatusCode != 413 || got != `{"error":"big"}` {
			t.Errorf("status %d body %q", resp.StatusCode, got)
		}
	})
	nothingKept(t, tr)
	readNow()
	up.awaitClose(t, "the connection with a body half sent was not closed")
	if in, cut := tr.largeInline.Load(), tr.largeCut.Load(); in != 1 || cut != 1 {
		t.Fatalf("large bodies written inline %d, cut %d (want 1, 1: the write stopped for the early answer)", in, cut)
	}
}

// The header timeout of a large body counts from when it is all written:
// an upstream that starts reading the body only after longer than the
// timeout, and then answers, gets its answer through; one that reads it
// and never answers gets the timeout.
func TestH1LargeBodyHeaderTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tr, _ := testH1Dial(t, dialSmall, timeout, time.Minute, 4)
	late := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		smallBuffers(c)
		r, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		time.Sleep(2 * timeout) // the body waits in the socket buffers, which cannot take it all
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(c, okAnswer)
		_, _ = br.ReadByte()
	})
	if got := bodyOf(t)(postBody(within(t), tr, late.url(), largeBody())); got != "{}" {
		t.Fatalf("answer %q", got)
	}
	hold := make(chan struct{})
	defer close(hold)
	mute := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		u.readRequest(br)
		<-hold
	})
	inTime(t, func() {
		_, err := postBody(within(t), tr, mute.url(), largeBody())
		if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") {
			t.Errorf("err %v: want a timeout awaiting the header", err)
		}
	})
}

// An answer that starts before a large body is all written (a stream
// the upstream begins while it still reads) goes on past the header
// timeout: the timeout is for a header not yet come, and is not armed
// once it came, whenever the write ends.
func TestH1LargeBodyStreamedEarly(t *testing.T) {
	const timeout = 200 * time.Millisecond
	tr, _ := testH1Dial(t, dialSmall, timeout, time.Minute, 4)
	const events = "data:1\n\ndata:2\n\ndata:3\n\ndata:4\n\ndata:5\n\n"
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		got, ok := answerBeforeBody(c, br, "text/event-stream", len(events))
		if !ok {
			return
		}
		if !bytes.Equal(got, largeBody()) { // the rest, sent aside, goes on where the write stopped
			_, _ = io.WriteString(c, "data:body not whole\n\n")
			return
		}
		for e := range strings.SplitAfterSeq(events, "\n\n") {
			if e == "" {
				break
			}
			time.Sleep(timeout / 2) // five events over 2.5 header timeouts
			if _, err := io.WriteString(c, e); err != nil {
				return
			}
		}
		_, _ = br.ReadByte()
	})
	inTime(t, func() {
		if got := bodyOf(t)(postBody(within(t), tr, up.url(), largeBody())); got != events {
			t.Errorf("stream %q, want %q", got, events)
		}
	})
	// The write began in the caller's goroutine and went on aside once
	// the header came.
	if in, cut := tr.largeInline.Load(), tr.largeCut.Load(); in != 1 || cut != 1 {
		t.Fatalf("large bodies written inline %d, cut %d (want 1, 1)", in, cut)
	}
}

// answerBeforeBody is an upstream that answers a large body before it has
// read it all: it reads the request's header and the body's first MiB,
// writes the answer's header (its type and length), waits for the proxy
// to read it while the body's write is held, then reads the rest of the
// body and returns all of it, for the caller to write the answer's body.
func answerBeforeBody(c net.Conn, br *bufio.Reader, contentType string, length int) ([]byte, bool) {
	smallBuffers(c)
	r, err := http.ReadRequest(br)
	if err != nil {
		return nil, false
	}
	var got bytes.Buffer
	if _, err := io.CopyN(&got, r.Body, 1<<20); err != nil {
		return nil, false
	}
	_, _ = fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", contentType, length)
	time.Sleep(50 * time.Millisecond) // the header is read before the body is all written
	_, _ = io.Copy(&got, r.Body)
	return got.Bytes(), true
}

// A large body whose write fails, to an upstream that neither answers
// nor closes: the write's error comes back at once, as from a body
// written inline, not when the client gives up; and to an upstream that
// answered early (a 413) before the write failed: its answer comes back.
// Both where the body is written aside (a connection with nothing to
// peek) and where it is written in the caller's goroutine.
func TestH1LargeBodyWriteFails(t *testing.T) {
	for _, inline := range []bool{false, true} {
		for _, answers := range []bool{false, true} {
			name := map[bool]string{false: "aside", true: "inline"}[inline] + map[bool]string{false: "/no answer", true: "/an early 413"}[answers]
			t.Run(name, func(t *testing.T) { testLargeBodyWriteFails(t, inline, answers) })
		}
	}
}

func testLargeBodyWriteFails(t *testing.T, inline, answers bool) {
	hold := make(chan struct{})
	defer close(hold)
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		if _, err := http.ReadRequest(br); err != nil {
			return
		}
		if answers {
			_, _ = io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: 15\r\n\r\n{\"error\":\"big\"}")
		}
		<-hold
	})
	var d net.Dialer
	tr, _ := testH1Dial(t, func(ctx context.Context, n, a string) (net.Conn, error) {
		c, err := d.DialContext(ctx, n, a)
		if err != nil {
			return nil, err
		}
		cw := &cutWrites{Conn: c, left: 256 << 10}
		if inline {
			return &cutWritesRaw{cw}, nil
		}
		return cw, nil
	}, time.Minute, time.Minute, 4)
	inTime(t, func() {
		resp, err := postBody(within(t), tr, up.url(), largeBody())
		if answers {
			if got := readWhole(t, resp, err); resp.StatusCode != 413 || got != `{"error":"big"}` {
				t.Errorf("status %d body %q", resp.StatusCode, got)
			}
			return
		}
		if err == nil || !strings.Contains(err.Error(), syscall.ECONNRESET.Error()) {
			t.Errorf("err %v, want the write's %q", err, syscall.ECONNRESET.Error())
		}
	})
	if in := tr.largeInline.Load(); in != map[bool]int64{false: 0, true: 1}[inline] {
		t.Errorf("%d large bodies written inline", in)
	}
}

// cutWritesRaw is cutWrites with the connection's own raw connection: the
// transport can peek it, so a large body is written inline.
type cutWritesRaw struct{ *cutWrites }

func (c *cutWritesRaw) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// A body far shorter than its declared length gets Request.Write's error,
// written inline as aside, and nothing of it goes out.
func TestH1LargeBodyShort(t *testing.T) {
	tr, _ := testH1(t, time.Minute, time.Minute, 4)
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		_, _ = br.ReadByte()
	})
	req, _ := http.NewRequestWithContext(within(t), http.MethodPost, up.url()+"/v1/chat/completions", bytes.NewReader(make([]byte, 1000)))
	req.ContentLength = 2 * maxInlineBody
	_, err := tr.RoundTrip(req)
	if want := fmt.Sprintf("http: ContentLength=%d with Body length 1000", 2*maxInlineBody); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err %v, want %q", err, want)
	}
}

// Many callers at once share the connections, each answer whole.
func TestH1Concurrent(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		for {
			r, ok := u.readRequest(br)
			if !ok {
				return
			}
			body := r.URL.Query().Get("n")
			if _, err := fmt.Fprintf(c, "HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
				return
			}
		}
	})
	tr, _ := testH1(t, 0, time.Minute, 8)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 50 {
				want := fmt.Sprintf("%d-%d", g, i)
				req, _ := http.NewRequest(http.MethodGet, up.url()+"/?n="+want, nil)
				resp, err := tr.RoundTrip(req)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || string(b) != want {
					t.Errorf("got %q (%v), want %q", b, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := up.conns.Load(); n > 16 {
		t.Fatalf("%d connections for 16 callers", n)
	}
}

// An upstream that answers before it has read the whole body and closes
// (a 413): the client gets that answer, as from http.Transport, not a
// write error.
func TestH1AnswerBeforeTheWholeBody(t *testing.T) {
	testH1(t, 0, time.Minute, 1) // skips where the transport is not used
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		if _, err := http.ReadRequest(br); err != nil { // the header only: the body is not read
			return
		}
		u.requests.Add(1)
		_, _ = io.WriteString(c, "HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: 15\r\nConnection: close\r\n\r\n{\"error\":\"big\"}")
		_, _ = br.ReadByte() // holds until the proxy closes
	})
	// The connection's writes fail past the first 4 KiB, as when the
	// upstream resets it: a write error the loopback's buffers never give.
	var d net.Dialer
	dial := func(ctx context.Context, n, a string) (net.Conn, error) {
		c, err := d.DialContext(ctx, n, a)
		return &cutWrites{Conn: c, left: 4 << 10}, err
	}
	tr := newH1Transport(http.DefaultTransport, dial, time.Minute, time.Minute, 4, 16)
	body := bytes.Repeat([]byte("x"), maxInlineBody)
	req, _ := http.NewRequestWithContext(within(t), http.MethodPost, up.url()+"/v1/chat/completions", bytes.NewReader(body))
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readWhole(t, resp, nil); resp.StatusCode != 413 || got != `{"error":"big"}` {
		t.Fatalf("status %d body %q", resp.StatusCode, got)
	}
}

// cutWrites fails every write once left bytes have gone out.
type cutWrites struct {
	net.Conn
	left int
}

func (c *cutWrites) Write(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, syscall.ECONNRESET
	}
	n, err := c.Conn.Write(p[:min(len(p), c.left)])
	if c.left -= n; err == nil && n < len(p) {
		err = syscall.ECONNRESET
	}
	return n, err
}

// hookConn calls hook before each read deadline the transport sets, and
// tells past when the connection was closed (the client left).
type hookConn struct {
	net.Conn
	closed chan struct{}
	once   sync.Once
	hook   func(time.Time)
}

func (c *hookConn) SetReadDeadline(t time.Time) error {
	c.hook(t)
	return c.Conn.SetReadDeadline(t)
}

func (c *hookConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// The client leaves at the worst moments: just before the transport sets
// the header's deadline, and just before it clears it. Either way the
// round trip (or the body read after it) returns at once, where a cancel
// that set a past deadline was undone by the transport's own deadline
// and the call waited the whole header timeout, or forever on a stream.
func TestH1CancelNotUndoneByDeadlines(t *testing.T) {
	testH1(t, 0, time.Minute, 1) // skips where the transport is not used
	for _, when := range []string{"before the header", "after the header"} {
		t.Run(when, func(t *testing.T) {
			up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
				u.readRequest(br)
				if when == "after the header" {
					_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
				}
				_, _ = br.ReadByte() // holds until the proxy closes
			})
			ctx, cancel := context.WithCancel(within(t))
			var d net.Dialer
			dial := func(ctx context.Context, n, a string) (net.Conn, error) {
				c, err := d.DialContext(ctx, n, a)
				if err != nil {
					return nil, err
				}
				hc := &hookConn{Conn: c, closed: make(chan struct{})}
				hc.hook = func(dl time.Time) {
					if dl.IsZero() == (when == "after the header") {
						cancel()
						<-hc.closed // the cancel has run
					}
				}
				return hc, nil
			}
			tr := newH1Transport(http.DefaultTransport, dial, time.Minute, time.Minute, 4, 16)
			var resp *http.Response
			var err error
			inTime(t, func() { resp, err = post(ctx, tr, up.url()) })
			if when == "before the header" {
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("err %v, want context.Canceled", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			inTime(t, func() { _, err = resp.Body.Read(make([]byte, 10)) })
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("body read: %v, want context.Canceled", err)
			}
		})
	}
}

// A client gone before the round trip starts (during a transform, or
// between a retry's attempts): nothing reaches the upstream, even on a
// kept connection that is ready to take it.
func TestH1NothingSentForAClientGone(t *testing.T) {
	up := newRawUpstream(t, keepAnswering(okAnswer))
	tr, _ := testH1(t, time.Minute, time.Minute, 4)
	bodyOf(t)(post(within(t), tr, up.url())) // a kept connection
	for range 50 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := post(ctx, tr, up.url()); !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v, want context.Canceled", err)
		}
	}
	bodyOf(t)(post(within(t), tr, up.url())) // the upstream has read everything sent before this
	if got := up.requests.Load(); got != 2 || up.conns.Load() != 1 {
		t.Fatalf("the upstream read %d requests on %d connections, want 2 on 1", got, up.conns.Load())
	}
}

// Traffic stops: the kept connections are closed after the idle timeout
// all the same, as http.Transport's are.
func TestH1IdleClosedWhenQuiet(t *testing.T) {
	up := newRawUpstream(t, keepAnswering(okAnswer))
	tr, _ := testH1(t, 0, 100*time.Millisecond, 4)
	bodyOf(t)(post(within(t), tr, up.url()))
	up.awaitClose(t, "the idle connection is still open 50 idle timeouts later")
	nothingKept(t, tr)
}

// A body read after Close (the idle timer's) fails, as http.Transport's,
// instead of returning what was still buffered.
func TestH1ReadAfterClose(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		u.readRequest(br)
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n6\r\ndata:1\r\n6\r\ndata:2\r\n")
		_, _ = br.ReadByte()
	})
	tr, _ := testH1(t, 0, time.Minute, 4)
	resp, buf := firstEvent(t, tr, up.url())
	resp.Body.Close()
	if n, err := resp.Body.Read(buf); n > 0 || !errors.Is(err, http.ErrBodyReadAfterClose) {
		t.Fatalf("read after Close: %q, %v", buf[:n], err)
	}
}

// CloseIdleConnections closes what is kept and stops the idle timer (which
// would keep the transport, and through its dialer the proxy, reachable).
func TestH1CloseIdleConnections(t *testing.T) {
	up := newRawUpstream(t, keepAnswering(okAnswer))
	tr, _ := testH1(t, 0, time.Minute, 4)
	bodyOf(t)(post(within(t), tr, up.url()))
	tr.CloseIdleConnections()
	up.awaitClose(t, "the kept connection stayed open")
	nothingKept(t, tr)
}

// The idle timer also drops connections the upstream closed, before
// their idle timeout: nothing is left in CLOSE_WAIT for long, and with
// nothing kept the timer stops.
func TestH1SweepDropsConnectionsClosedByUpstream(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		if _, ok := u.readRequest(br); ok {
			_, _ = io.WriteString(c, okAnswer)
		}
	})
	tr, _ := testH1(t, 0, 400*time.Millisecond, 4)
	bodyOf(t)(post(within(t), tr, up.url()))
	<-up.closed
	time.Sleep(300 * time.Millisecond) // past the first sweep (200 ms), within the idle timeout
	nothingKept(t, tr)
}

// deadlineConn counts the read deadlines set on it (cleared ones apart).
type deadlineConn struct {
	net.Conn
	set, cleared *atomic.Int64
}

func (c *deadlineConn) SetReadDeadline(t time.Time) error {
	if t.IsZero() {
		c.cleared.Add(1)
	} else {
		c.set.Add(1)
	}
	return c.Conn.SetReadDeadline(t)
}

// SyscallConn is the connection's own: the transport checks it idle.
func (c *deadlineConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// countDeadlines dials deadlineConns counting into set and cleared.
func countDeadlines(set, cleared *atomic.Int64) func(context.Context, string, string) (net.Conn, error) {
	var d net.Dialer
	return func(ctx context.Context, n, a string) (net.Conn, error) {
		c, err := d.DialContext(ctx, n, a)
		if err != nil {
			return nil, err
		}
		return &deadlineConn{Conn: c, set: set, cleared: cleared}, nil
	}
}

// The header's read deadline is set once for many small answers, each
// read whole with its header, and stays set between them. It is cleared
// after the header whenever the body is still to come, before a large
// body's write, and when the connection goes back to the pool if it would
// pass while it waits there; a header that never comes on a reused
// connection still times out.
func TestH1HeaderDeadlineKept(t *testing.T) {
	testH1(t, 0, time.Minute, 1) // skips where the transport is not used
	t.Run("small answers", func(t *testing.T) {
		up := newRawUpstream(t, keepAnswering(okAnswer))
		var set, cleared atomic.Int64
		tr, _ := testH1Dial(t, countDeadlines(&set, &cleared), time.Minute, time.Second, 4)
		for range 20 {
			if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
				t.Fatalf("body %q", got)
			}
		}
		if up.conns.Load() != 1 || set.Load() != 1 || cleared.Load() != 0 {
			t.Fatalf("connections %d, deadlines set %d, cleared %d; want 1, 1, 0", up.conns.Load(), set.Load(), cleared.Load())
		}
	})
	t.Run("a slow body after a kept deadline", func(t *testing.T) {
		const header = 300 * time.Millisecond
		up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
			if _, ok := u.readRequest(br); !ok {
				return
			}
			_, _ = io.WriteString(c, okAnswer)
			if _, ok := u.readRequest(br); !ok {
				return
			}
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
			for i := range 4 { // the last piece comes two header timeouts after the header
				time.Sleep(header * 2 / 3)
				_, _ = fmt.Fprintf(c, "7\r\ndata:%d\n\r\n", i)
			}
			_, _ = io.WriteString(c, "0\r\n\r\n")
			_, _ = br.ReadByte()
		})
		var set, cleared atomic.Int64
		tr, _ := testH1Dial(t, countDeadlines(&set, &cleared), header, header/3, 4)
		if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
			t.Fatalf("body %q", got)
		}
		if got := bodyOf(t)(post(within(t), tr, up.url())); got != "data:0\ndata:1\ndata:2\ndata:3\n" {
			t.Fatalf("stream %q", got)
		}
		if up.conns.Load() != 1 || cleared.Load() != 1 {
			t.Fatalf("connections %d, deadlines cleared %d; want 1, 1 (after the stream's header)", up.conns.Load(), cleared.Load())
		}
	})
	t.Run("a header that never comes", func(t *testing.T) {
		hold := make(chan struct{})
		defer close(hold)
		up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
			if _, ok := u.readRequest(br); !ok {
				return
			}
			_, _ = io.WriteString(c, okAnswer)
			u.readRequest(br)
			<-hold
		})
		tr, _ := testH1(t, 300*time.Millisecond, 100*time.Millisecond, 4)
		if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
			t.Fatalf("body %q", got)
		}
		var err error
		inTime(t, func() { _, err = post(within(t), tr, up.url()) })
		if err == nil || !strings.Contains(err.Error(), "timeout awaiting response headers") || up.conns.Load() != 1 {
			t.Fatalf("err %v on %d connections: want a timeout awaiting the header on the one kept", err, up.conns.Load())
		}
	})
	t.Run("a slow large body after a kept deadline", func(t *testing.T) {
		const header = 300 * time.Millisecond
		body := bytes.Repeat([]byte("x"), 1<<20)
		up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
			smallBuffers(c)
			if _, ok := u.readRequest(br); !ok {
				return
			}
			_, _ = io.WriteString(c, okAnswer)
			r, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			buf := make([]byte, 64<<10)
			for { // the body's write outlasts the deadline the first answer left
				time.Sleep(header / 8)
				if _, err := io.ReadFull(r.Body, buf); err != nil {
					break
				}
			}
			_, _ = io.WriteString(c, okAnswer)
			_, _ = br.ReadByte()
		})
		tr, _ := testH1Dial(t, dialSmall, header, header/3, 4)
		if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
			t.Fatalf("body %q", got)
		}
		if got := bodyOf(t)(postBody(within(t), tr, up.url(), body)); got != "{}" || up.conns.Load() != 1 {
			t.Fatalf("large body: answer %q on %d connections, want {} on one", got, up.conns.Load())
		}
	})
	t.Run("a slow header, then idle within the idle timeout", func(t *testing.T) {
		const header, idle = 400 * time.Millisecond, 200 * time.Millisecond // kept: header > 1.5 idle
		up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
			for first := true; ; first = false {
				if _, ok := u.readRequest(br); !ok {
					return
				}
				if first {
					time.Sleep(300 * time.Millisecond) // leaves the kept deadline 100 ms + its slack
				}
				if _, err := io.WriteString(c, okAnswer); err != nil {
					return
				}
			}
		})
		tr, _ := testH1(t, header, idle, 4)
		for i := range 2 {
			if i > 0 {
				time.Sleep(170 * time.Millisecond) // within the idle timeout, past the deadline the first answer left
			}
			if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
				t.Fatalf("answer %d: body %q", i, got)
			}
		}
		if n := up.conns.Load(); n != 1 {
			t.Fatalf("connections %d, want 1: a connection reused within the idle timeout", n)
		}
	})
	t.Run("idle longer than the header timeout", func(t *testing.T) {
		up := newRawUpstream(t, keepAnswering(okAnswer))
		var set, cleared atomic.Int64
		tr, _ := testH1Dial(t, countDeadlines(&set, &cleared), 50*time.Millisecond, time.Minute, 4)
		for range 2 {
			if got := bodyOf(t)(post(within(t), tr, up.url())); got != "{}" {
				t.Fatalf("body %q", got)
			}
			time.Sleep(100 * time.Millisecond) // a deadline left set would pass meanwhile and fail the idle check
		}
		if up.conns.Load() != 1 || cleared.Load() != 2 {
			t.Fatalf("connections %d, deadlines cleared %d; want 1, 2", up.conns.Load(), cleared.Load())
		}
	})
}

// An answer whose body came whole with its header says it is in memory
// (the proxy starts no idle timer for it); a body still to come, or one
// without a declared length, does not.
func TestH1BodyInMemory(t *testing.T) {
	up := newRawUpstream(t, func(u *rawUpstream, c net.Conn, br *bufio.Reader, _ int64) {
		for _, answer := range []string{
			okAnswer,
			"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{}",
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		} {
			if _, ok := u.readRequest(br); !ok {
				return
			}
			_, _ = io.WriteString(c, answer)
			if strings.Contains(answer, "Length: 4") {
				time.Sleep(50 * time.Millisecond)
				_, _ = io.WriteString(c, "{}")
			}
		}
	})
	tr, _ := testH1(t, time.Minute, time.Second, 4)
	for i, want := range []bool{true, false, false} {
		resp, err := post(within(t), tr, up.url())
		if err != nil {
			t.Fatal(err)
		}
		if got := inMemory(resp.Body); got != want {
			t.Errorf("answer %d: in memory %v, want %v", i, got, want)
		}
		if _, err := io.ReadAll(resp.Body); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		resp.Body.Close()
	}
}
