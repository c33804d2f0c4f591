package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"regexp"
	"runtime/metrics"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// serveBoth serves h on two loopback listeners: net/http's server alone,
// and Server in front of it. It returns their addresses.
func serveBoth(t testing.TB, h http.Handler) (plain, fast string) {
	t.Helper()
	quiet := log.New(io.Discard, "", 0)
	ln1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s1 := &http.Server{Handler: h, ErrorLog: quiet, ReadHeaderTimeout: 5 * time.Second}
	s2 := NewServer(&http.Server{Handler: h, ErrorLog: quiet, ReadHeaderTimeout: 5 * time.Second})
	go func() { _ = s1.Serve(ln1) }()
	go func() { _ = s2.Serve(ln2) }()
	t.Cleanup(func() { _ = s1.Close(); _ = s2.Close() })
	return ln1.Addr().String(), ln2.Addr().String()
}

// readRecorder keeps every byte read through it.
type readRecorder struct {
	r   io.Reader
	buf bytes.Buffer
}

func (r *readRecorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf.Write(p[:n])
	return n, err
}

var dateLine = regexp.MustCompile(`(?m)^Date: [^\r\n]*\r\n`)

// exchange writes each of raws to a new connection to addr (all at once
// when pipelined), reads as many final responses, and returns them as
// read (the Date header's value blanked), then whether the server closed
// the connection afterwards.
func exchange(t *testing.T, addr string, pipelined bool, raws ...string) []string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	rec := &readRecorder{r: c}
	br := bufio.NewReader(rec)
	var out []string
	if pipelined {
		if _, err := io.WriteString(c, strings.Join(raws, "")); err != nil {
			t.Fatal(err)
		}
	}
	for _, raw := range raws {
		if !pipelined {
			if _, err := io.WriteString(c, raw); err != nil {
				out = append(out, "write: "+errText(err))
				break
			}
		}
		method, _, _ := strings.Cut(raw, " ")
		start := rec.buf.Len() - br.Buffered()
		var resp *http.Response
		for {
			resp, err = http.ReadResponse(br, &http.Request{Method: method})
			if err != nil || resp.StatusCode >= 200 {
				break
			}
		}
		if err != nil {
			out = append(out, "read: "+errText(err))
			break
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		out = append(out, dateLine.ReplaceAllString(string(rec.buf.Bytes()[start:rec.buf.Len()-br.Buffered()]), "Date: D\r\n"))
	}
	_ = c.SetReadDeadline(time.Now().Add(80 * time.Millisecond))
	var one [1]byte
	switch _, err := br.Read(one[:]); {
	case errors.Is(err, io.EOF):
		out = append(out, "closed")
	case err != nil && errors.Is(err, syscall.ECONNRESET):
		out = append(out, "closed")
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			out = append(out, "open")
		} else {
			out = append(out, fmt.Sprintf("after: %v", err))
		}
	}
	return out
}

// firstDiff says where two exchanges first differ, briefly.
func firstDiff(want, got []string) string {
	for i := range max(len(want), len(got)) {
		if i >= len(want) || i >= len(got) {
			return fmt.Sprintf("net/http %d answers, Server %d; last: %q / %q", len(want), len(got), want[len(want)-1], got[len(got)-1])
		}
		a, b := want[i], got[i]
		if a == b {
			continue
		}
		j := 0
		for j < len(a) && j < len(b) && a[j] == b[j] {
			j++
		}
		from := max(j-80, 0)
		return fmt.Sprintf("answer %d differs at byte %d (lengths %d, %d):\nnet/http: %q\nServer:   %q", i, j, len(a), len(b), a[from:min(len(a), j+80)], b[from:min(len(b), j+80)])
	}
	return "same"
}

// errText is an error's text without the addresses a network error names;
// the ways a closed connection shows (which one depends on timing) are
// one: "closed".
func errText(err error) string {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return "closed"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err.Error()
	}
	return err.Error()
}

// echo is a handler that answers with what it was given.
func echo(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	host, _, _ := net.SplitHostPort(r.RemoteAddr)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range r.Header {
			if !yield(k) {
				return
			}
		}
	})
	var hdr strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&hdr, "%s=%q;", k, r.Header[k])
	}
	_, local := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	_, server := r.Context().Value(http.ServerContextKey).(*http.Server)
	fmt.Fprintf(w, "%s %s %s host=%s remote=%s cl=%d close=%v te=%v trailer=%v form=%v hdr=%s body=%q err=%v local=%v server=%v",
		r.Method, r.RequestURI, r.Proto, r.Host, host, r.ContentLength, r.Close, r.TransferEncoding, r.Trailer, r.Form, hdr.String(), body, err, local, server)
}

func rawPost(path, body string, headers ...string) string {
	h := ""
	for _, x := range headers {
		h += x + "\r\n"
	}
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: api.example\r\n%sContent-Length: %d\r\n\r\n%s", path, h, len(body), body)
}

// TestServerSameBytes: for every way a handler answers and every request
// a client sends (served here or handed to net/http), Server's client
// reads the same bytes as net/http's server's, Date's value aside, and the
// connection is left open or closed alike.
func TestServerSameBytes(t *testing.T) {
	handlers := map[string]http.HandlerFunc{
		"echo": echo,
		"typed": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "11")
			w.Header().Add("X-Multi", "a")
			w.Header().Add("X-Multi", "b")
			_, _ = io.WriteString(w, `{"ok":true}`)
		},
		"stream": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			for i := range 3 {
				fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
				_ = http.NewResponseController(w).Flush()
			}
			_, _ = io.WriteString(w, "data: [DONE]\n\n")
		},
		"large": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			_, _ = io.WriteString(w, "<html>"+strings.Repeat("z", 5000))
			_, _ = io.WriteString(w, strings.Repeat("w", 100))
		},
		"error": func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "no such model", http.StatusNotFound)
		},
		"nocontent": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNoContent)
			_, err := io.WriteString(w, "ignored")
			w.Header().Set("X-After", err.Error())
		},
		"notmodified": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Content-Length", "5")
			w.WriteHeader(http.StatusNotModified)
		},
		"unread413": func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "too large", http.StatusRequestEntityTooLarge)
		},
		"closedbody": func(w http.ResponseWriter, r *http.Request) {
			var p [10]byte
			_, _ = r.Body.Read(p[:])
			r.Body.Close()
			_, _ = io.WriteString(w, "closed early")
		},
		"trailer": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Trailer", "X-Sum, Content-Length")
			_, _ = io.WriteString(w, "body")
			w.Header().Set("X-Sum", "42")
			w.Header().Set(http.TrailerPrefix+"X-Late", "late")
		},
		"connclose": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		},
		"short": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "10")
			_, _ = io.WriteString(w, "12345")
		},
		"overlong": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "3")
			_, err := io.WriteString(w, "12345")
			_, _ = io.WriteString(w, err.Error()[:0])
		},
		"badlength": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "x")
			_, _ = io.WriteString(w, "body")
		},
		"early": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Link", "</a>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, "accepted")
		},
		"odd": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(599)
		},
		"identity": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "identity")
			_, _ = io.WriteString(w, "until close")
			_ = http.NewResponseController(w).Flush()
		},
		"chunkedset": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "chunked")
			w.Header().Set("Content-Length", "4")
			_, _ = io.WriteString(w, "four")
		},
		"encoded": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = io.WriteString(w, "\x1f\x8b")
		},
		"afterheader": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Before", "1")
			w.WriteHeader(http.StatusCreated)
			w.Header().Set("X-After", "2")
			_, _ = io.WriteString(w, "made")
		},
		"nothing": func(w http.ResponseWriter, r *http.Request) {},
		"panic": func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "half")
			panic("the handler failed")
		},
		"abort": func(w http.ResponseWriter, r *http.Request) {
			panic(http.ErrAbortHandler)
		},
	}
	requests := serverRequests()
	for hn, h := range handlers {
		t.Run(hn, func(t *testing.T) {
			t.Parallel()
			plain, fast := serveBoth(t, h)
			for rn, raws := range requests {
				for _, pipelined := range []bool{false, true} {
					if pipelined && len(raws) < 2 {
						continue
					}
					want := exchange(t, plain, pipelined, raws...)
					got := exchange(t, fast, pipelined, raws...)
					if !slices.Equal(got, want) {
						t.Errorf("%s request (pipelined %v): %s", rn, pipelined, firstDiff(want, got))
					}
				}
			}
		})
	}
}

// TestServerShortBody: a client that half-closes before the declared
// length gets what net/http's server gives it, and the handler sees the
// same error.
func TestServerShortBody(t *testing.T) {
	errs := make(chan string, 2)
	plain, fast := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		errs <- fmt.Sprintf("%v, context %v", err, r.Context().Err())
		_, _ = io.WriteString(w, "read")
	}))
	read := func(addr string) (string, string) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nhi")
		_ = c.(*net.TCPConn).CloseWrite()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(c)
		return dateLine.ReplaceAllString(string(b), "Date: D\r\n"), <-errs
	}
	w1, e1 := read(plain)
	w2, e2 := read(fast)
	if w1 != w2 || e1 != e2 {
		t.Fatalf("net/http: %q (%s)\nServer:   %q (%s)", w1, e1, w2, e2)
	}
	if e2 != io.ErrUnexpectedEOF.Error()+", context "+context.Canceled.Error() {
		t.Fatalf("the handler read %s, want unexpected EOF", e2)
	}
}

// goroutinesCreated reads how many goroutines the process has started.
func goroutinesCreated() uint64 {
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestServerNoGoroutinePerRequest: Server serves the requests of a kept
// connection without starting a goroutine for any (net/http's server
// starts one per request with a body, as it reads the body's end).
func TestServerNoGoroutinePerRequest(t *testing.T) {
	plain, fast := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	const n = 200
	count := func(addr string) uint64 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		br := bufio.NewReader(c)
		raw := rawPost("/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
		roundTrip := func() {
			if _, err := io.WriteString(c, raw); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		roundTrip() // the connection's own goroutine
		before := goroutinesCreated()
		for range n {
			roundTrip()
		}
		return goroutinesCreated() - before
	}
	if got := count(plain); got < n {
		t.Fatalf("net/http's server started %d goroutines for %d requests: the comparison no longer holds", got, n)
	}
	if got := count(fast); got > n/10 {
		t.Fatalf("Server started %d goroutines for %d requests on one connection", got, n)
	}
}

// TestServerClientLeaves: a request still running after watchAfter sees
// its context cancelled when the client closes the connection, as under
// net/http's server; a request that ends sooner is not watched at all.
func TestServerClientLeaves(t *testing.T) {
	cancelled := make(chan time.Duration, 1)
	_, fast := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		start := time.Now()
		select {
		case <-r.Context().Done():
			cancelled <- time.Since(start)
		case <-time.After(5 * time.Second):
			cancelled <- -1
		}
	}))
	c, err := net.Dial("tcp", fast)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, rawPost("/a", "{}"))
	time.Sleep(2 * watchAfter)
	c.Close()
	if d := <-cancelled; d < 0 || d > time.Second {
		t.Fatalf("the handler's context was cancelled after %v, want soon after the client left", d)
	}
}

// TestServerNextRequestWhileWatched: a byte of the next request read by
// the watch is given to the next request, not lost.
func TestServerNextRequestWhileWatched(t *testing.T) {
	c, _, release := slowEcho(t)
	_, _ = io.WriteString(c, rawPost("/a", "slow"))
	time.Sleep(3 * watchAfter) // the watch is reading now
	_, _ = io.WriteString(c, rawPost("/b", "next"))
	time.Sleep(watchAfter)
	close(release)
	readAnswers(t, c, "slow", "next")
}

// slowEcho serves, on the proxy's own server, a handler that answers a
// request's body with itself, and a body of "slow" once release is
// closed (running says it is waiting); it returns a connection to it.
func slowEcho(t *testing.T) (c net.Conn, running <-chan struct{}, release chan struct{}) {
	t.Helper()
	run := make(chan struct{}, 1)
	release = make(chan struct{})
	_, fast := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) == "slow" {
			select {
			case run <- struct{}{}:
			default:
			}
			<-release
		}
		_, _ = w.Write(b)
	}))
	c, err := net.Dial("tcp", fast)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, run, release
}

// readAnswers reads one answer from c for each of wants, and fails unless
// their bodies are wants, in order.
func readAnswers(t *testing.T, c net.Conn, wants ...string) {
	t.Helper()
	br := bufio.NewReader(c)
	for _, want := range wants {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading the answer %q: %v", want, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if string(b) != want {
			t.Fatalf("got %q, want %q", b, want)
		}
	}
}

// TestServerShutdown: Shutdown closes a connection waiting for a request,
// lets a running request finish (answered with Connection: close), and
// returns once it has; with the grace over, it says so.
func TestServerShutdown(t *testing.T) {
	started := make(chan struct{})
	release := make(chan struct{})
	s := NewServer(&http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/slow" {
			close(started)
			<-release
		}
		_, _ = io.WriteString(w, "done")
	})})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- s.Serve(ln) }()
	idle, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	_, _ = io.WriteString(idle, rawPost("/fast", "x"))
	ibr := bufio.NewReader(idle)
	if resp, err := http.ReadResponse(ibr, nil); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	busy, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, _ = io.WriteString(busy, rawPost("/slow", "x"))
	<-started

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := s.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Shutdown with a request running past the grace: %v", err)
	}
	_ = idle.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := ibr.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("the idle connection: %v, want closed", err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var sdErr error
	go func() {
		defer wg.Done()
		sdErr = s.Shutdown(context.Background())
	}()
	close(release)
	_ = busy.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(busy), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if string(b) != "done" || !resp.Close {
		t.Fatalf("the running request got %q, close %v", b, resp.Close)
	}
	wg.Wait()
	if sdErr != nil {
		t.Fatalf("Shutdown after the last request: %v", sdErr)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
}

// TestServerHeldByteInOrder: while a slow request runs, its watch reads the
// first byte of a request sent later; requests already in the buffer
// (served here or handed to net/http) come before it, and a second watch
// does not read over it.
func TestServerHeldByteInOrder(t *testing.T) {
	_, fast := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if string(b) == "slow" {
			time.Sleep(3 * watchAfter)
		}
		_, _ = io.WriteString(w, r.Method+" "+r.URL.Path+" "+string(b))
	}))
	for name, tc := range map[string]struct {
		first, later string
		want         []string
	}{
		"handed over": {
			first: rawPost("/a", "slow") + "DELETE /metrics HTTP/1.1\r\nHost: a\r\n\r\n",
			later: rawPost("/b", "late"),
			want:  []string{"POST /a slow", "DELETE /metrics ", "POST /b late"},
		},
		"two watches": {
			first: rawPost("/a", "slow") + rawPost("/b", "slow"),
			later: rawPost("/c", "late"),
			want:  []string{"POST /a slow", "POST /b slow", "POST /c late"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := net.Dial("tcp", fast)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, tc.first)
			time.Sleep(2 * watchAfter) // the first request's watch is reading
			for _, b := range []byte(tc.later) {
				_, _ = c.Write([]byte{b}) // a byte at a time: a watch reads one
				time.Sleep(time.Millisecond)
			}
			readAnswers(t, c, tc.want...)
		})
	}
}

// TestServerRequestEndsAsWatchStarts: requests that end about when their
// watch starts are all answered (a watch that began as its request ended
// once read on with no deadline, and the answer waited for it). A watch
// starts at the wheel's first tick from watchAfter on, so the requests'
// lengths run from just under watchAfter to past watchAfter+wheelEvery.
func TestServerRequestEndsAsWatchStarts(t *testing.T) {
	_, fast := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		var d time.Duration
		_, _ = fmt.Sscan(r.URL.Query().Get("ms"), &d)
		time.Sleep(d * time.Microsecond)
		_, _ = io.WriteString(w, "ok")
	}))
	var wg sync.WaitGroup
	for conn := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", fast)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			for i := range 12 {
				step := int((wheelEvery + 4*time.Millisecond) / time.Microsecond / 48)
				us := int(watchAfter/time.Microsecond) - 2000 + (conn*12+i)*step // 48 values from watchAfter−2 ms to past watchAfter+wheelEvery
				_, _ = io.WriteString(c, rawPost(fmt.Sprintf("/a?ms=%d", us), "x"))
				_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Errorf("request ending %d µs in: %v", us, err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
			}
		}()
	}
	wg.Wait()
}

// TestServerHandsOverHalfClose: a connection handed to net/http (here a
// CONNECT, as the HTTPS_PROXY mode gets) can still be half-closed, as
// goproxy's tunnels and net/http's server do.
func TestServerHandsOverHalfClose(t *testing.T) {
	plain, fast := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		_, half := c.(interface {
			CloseWrite() error
			CloseRead() error
		})
		_, rf := c.(io.ReaderFrom)
		fmt.Fprintf(brw, "HTTP/1.1 200 OK\r\n\r\nhalf-close %v, ReadFrom %v", half, rf)
		_ = brw.Flush()
		if half {
			_ = c.(interface{ CloseWrite() error }).CloseWrite()
		}
	}))
	read := func(addr string) string {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "CONNECT api.example:443 HTTP/1.1\r\nHost: api.example:443\r\n\r\n")
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("reading until the server's half-close: %v", err)
		}
		return string(b)
	}
	if want, got := read(plain), read(fast); got != want {
		t.Fatalf("net/http: %q\nServer:   %q", want, got)
	}
}

// TestServerShutdownSilentConnection: a connection that never sent a
// byte does not hold Shutdown up.
func TestServerShutdownSilentConnection(t *testing.T) {
	s := NewServer(&http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: time.Minute})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = s.Serve(ln) }()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	time.Sleep(50 * time.Millisecond) // accepted
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v after %v", err, time.Since(start))
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("the silent connection: %v, want closed", err)
	}
}

// serverRequests are the requests TestServerSameBytes sends, by name: each
// a list of requests sent on one connection.
func serverRequests() map[string][]string {
	big := strings.Repeat("x", 300<<10)
	mid := strings.Repeat("y", 100<<10)
	return map[string][]string{
		"small":        {rawPost("/v1/chat/completions", `{"model":"m","messages":[]}`, "Content-Type: application/json", "Authorization: Bearer k", "X-Dup: 1", "X-Dup: 2")},
		"empty":        {rawPost("/v1/chat/completions", "")},
		"two":          {rawPost("/a", "1"), rawPost("/b?q=2", "22")},
		"thenget":      {rawPost("/a", "1"), "GET /metrics HTTP/1.1\r\nHost: api.example\r\n\r\n"},
		"clientclose":  {rawPost("/a", "1", "Connection: close")},
		"closetoken":   {rawPost("/a", "1", "Connection: Close 00"), rawPost("/b", "2")},          // net/http's token: space-bounded too
		"closelist":    {rawPost("/a", "1", "Connection: keep-alive, CLOSE"), rawPost("/b", "2")}, // comma-bounded: req.Close reads it too
		"closeword":    {rawPost("/a", "1", "Connection: closed"), rawPost("/b", "2")},            // not the token
		"closefold":    {rawPost("/a", "1", "Connection: clo\u017fe"), rawPost("/b", "2")},        // nor is "cloſe": no Unicode folding
		"big":          {rawPost("/a", big)},
		"mid":          {rawPost("/a", mid), rawPost("/b", "after")},
		"get":          {"GET /v1/models HTTP/1.1\r\nHost: api.example\r\n\r\n"},
		"getthenpost":  {"GET /v1/models HTTP/1.1\r\nHost: api.example\r\nAuthorization: Bearer k\r\n\r\n", rawPost("/a", "1")},
		"getbody":      {"GET /a HTTP/1.1\r\nHost: api.example\r\nContent-Length: 2\r\n\r\nhi", rawPost("/b", "2")},
		"getcrlf":      {"GET /a HTTP/1.1\r\nHost: api.example\r\n\r\n\r\n", rawPost("/b", "2")}, // CRLF is skipped after a POST only
		"getclose":     {"GET /a HTTP/1.1\r\nHost: api.example\r\nConnection: close\r\n\r\n"},
		"headthenpost": {"HEAD /v1/models HTTP/1.1\r\nHost: api.example\r\n\r\n", rawPost("/a", "1")},
		"delete":       {"DELETE /a HTTP/1.1\r\nHost: api.example\r\n\r\n", rawPost("/b", "2")},
		"chunked":      {"POST /a HTTP/1.1\r\nHost: api.example\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"},
		"expect":       {"POST /a HTTP/1.1\r\nHost: api.example\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi"},
		"http10":       {"POST /a HTTP/1.0\r\nHost: api.example\r\nContent-Length: 2\r\n\r\nhi"},
		"absolute":     {"POST http://api.example/a HTTP/1.1\r\nHost: api.example\r\nContent-Length: 2\r\n\r\nhi"},
		"nohost":       {"POST /a HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"},
		"badhost":      {"POST /a HTTP/1.1\r\nHost: a b\r\nContent-Length: 2\r\n\r\nhi"},
		"twohosts":     {"POST /a HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 2\r\n\r\nhi"},
		"badlength":    {"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: abc\r\n\r\nhi"},
		"twolengths":   {"POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nhi"},
		"badvalue":     {"POST /a HTTP/1.1\r\nHost: a\r\nX-Bad: a\x01b\r\nContent-Length: 2\r\n\r\nhi"},
		"upgrade":      {"POST /a HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nContent-Length: 2\r\n\r\nhi"},
		"lf":           {"POST /a HTTP/1.1\nHost: api.example\nContent-Length: 2\n\nhi"},
		"longheader":   {rawPost("/a", "hi", "X-Long: "+strings.Repeat("h", 5000))},
		"crlfafter":    {rawPost("/a", "1") + "\r\n", rawPost("/b", "2")},
		"garbage":      {"POST / HTTP/1.1\r\nHost: a\r\nBroken header line\r\n\r\n"},
		"pipelinedget": {rawPost("/a", "1"), "GET /b HTTP/1.1\r\nHost: a\r\n\r\n", rawPost("/c", "3")},
	}
}

// FuzzServerSameBytes: whatever bytes a client sends before it half-closes
// its connection, Server answers them (served or handed over) with the
// bytes net/http's server answers them with, Date's value aside.
func FuzzServerSameBytes(f *testing.F) {
	for _, raws := range serverRequests() {
		if raw := strings.Join(raws, ""); len(raw) < 8<<10 {
			f.Add(raw)
		}
	}
	plain, fast := serveBoth(f, http.HandlerFunc(echo))
	f.Fuzz(func(t *testing.T, raw string) {
		want, got := halfCloseExchange(t, plain, raw), halfCloseExchange(t, fast, raw)
		if got != want {
			t.Fatalf("for %q:\nnet/http: %q\nServer:   %q", raw, want, got)
		}
	})
}

// halfCloseExchange writes raw to a new connection to addr, half-closes it, and
// returns all the server wrote until it closed (Date's value blanked).
func halfCloseExchange(t *testing.T, addr, raw string) string {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, raw); err != nil {
		return "write: " + errText(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	b, err := io.ReadAll(c)
	out := dateLine.ReplaceAllString(string(b), "Date: D\r\n")
	if err != nil {
		out += " / " + errText(err)
	}
	return out
}

// TestServerKeepsConnAfterGet: a GET on a kept-alive connection (a client
// asking for /v1/models, or /metrics, before its chat requests) is served
// here, and the POSTs after it on that connection too: a connection
// handed to net/http's server stays there, and before GETs were served
// here every request after one went through net/http's server (the
// benchmark's seed requests did). HEAD still goes to net/http's.
func TestServerKeepsConnAfterGet(t *testing.T) {
	var mu sync.Mutex
	var served []string // each request's method and the writer that served it
	_, fast := serveBoth(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, here := w.(*response)
		mu.Lock()
		served = append(served, fmt.Sprintf("%s %v", r.Method, here))
		mu.Unlock()
		_, _ = io.WriteString(w, "ok")
	}))
	head := "HEAD /v1/models HTTP/1.1\r\nHost: api.example\r\n\r\n"
	for _, tc := range []struct {
		raws []string
		want []string
	}{
		{[]string{"GET /v1/models HTTP/1.1\r\nHost: api.example\r\n\r\n", rawPost("/v1/chat/completions", "{}"), rawPost("/v1/chat/completions", "{}")},
			[]string{"GET true", "POST true", "POST true"}},
		{[]string{head, rawPost("/v1/chat/completions", "{}")}, []string{"HEAD false", "POST false"}},
	} {
		served = nil
		got := exchange(t, fast, false, tc.raws...) // the answers, then whether the connection was closed
		if len(got) != len(tc.raws)+1 || got[len(got)-1] != "open" {
			t.Fatalf("%d answers to %d requests: %q", len(got)-1, len(tc.raws), got)
		}
		mu.Lock()
		if !slices.Equal(served, tc.want) {
			t.Errorf("served %q, want %q", served, tc.want)
		}
		mu.Unlock()
	}
}

// TestServerWatchLeavesTheWheel: a request's watch is on the wheel
// (watches) while the request waits for it, and off it once its read of
// the connection began (a request longer than watchAfter) or the request
// ended: the wheel holds no watch of a request that is over, nor one that
// has nothing left to look for (TestWheel checks the wheel then stops).
func TestServerWatchLeavesTheWheel(t *testing.T) {
	c, running, release := slowEcho(t)
	for range 3 {
		_, _ = io.WriteString(c, rawPost("/a", "quick"))
		readAnswers(t, c, "quick")
	}
	before := watches.size() // the wheel is the process's: another test's request may be on it
	_, _ = io.WriteString(c, rawPost("/b", "slow"))
	<-running
	if n := watches.size(); n != before+1 {
		t.Fatalf("%d watches on the wheel while the request runs, want %d", n, before+1)
	}
	time.Sleep(3 * watchAfter) // the watch is reading now: it left the wheel
	if n := watches.size(); n != before {
		t.Fatalf("%d watches on the wheel once the watch's read began, want %d", n, before)
	}
	close(release)
	readAnswers(t, c, "slow")
	waitWheel := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("after 5s: %s", what)
			}
		}
	}
	waitWheel("the watches left the wheel", func() bool { return watches.size() <= before })
}
