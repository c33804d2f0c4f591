package proxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
)

// extraFinisher holds the finish chunk and writes one more event before
// the held ones: more bytes than the upstream sent.
type extraFinisher struct{}

func (extraFinisher) Start(*Call, *ResponseInfo) FinishSession { return extraSession{} }

type extraSession struct{}

func (extraSession) Hold(ev *sse.Event) bool {
	return bytes.Contains(ev.Data, []byte(`"finish_reason":"stop"`))
}

func (extraSession) End(_ context.Context, held [][]byte, out *EventWriter) error {
	if err := out.Write([]byte("data: {\"extra\":\"XYZ\"}\n\n")); err != nil {
		return err
	}
	for _, h := range held {
		if err := out.Write(h); err != nil {
			return err
		}
	}
	return nil
}

func (extraSession) EndBody(_ context.Context, body []byte, _ KeepAlive) ([]byte, error) {
	return body, nil
}

// TestFinisherWithContentLengthStream: an SSE answer that came with a
// Content-Length (Go servers set one on short unflushed replies) reaches
// the client whole even when a finisher writes more than it held.
func TestFinisherWithContentLengthStream(t *testing.T) {
	body := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		io.WriteString(w, body)
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) { o.Finishers = []Finisher{extraFinisher{}} })
	_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	if !bytes.Contains(got, []byte("XYZ")) || !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
		t.Fatalf("client got %q", got)
	}
}

// TestHeldBodyOverLimit: a non-stream answer larger than max_body_bytes
// is not held for a finisher; it reaches the client whole.
func TestHeldBodyOverLimit(t *testing.T) {
	big := `{"choices":[{"message":{"content":"` + strings.Repeat("x", 5000) + `"},"finish_reason":"stop"}]}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, big[:2000])
		w.(http.Flusher).Flush()
		io.WriteString(w, big[2000:])
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Finishers, o.MaxBodyBytes = []Finisher{extraFinisher{}}, 1024
	})
	_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
	if string(got) != big {
		t.Fatalf("client got %d of %d bytes", len(got), len(big))
	}
}

// TestRetryQuestionHonoursIdleTimeout: an error answer that stalls while
// the proxy reads it to ask a Retrier is cut by the idle timeout.
func TestRetryQuestionHonoursIdleTimeout(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		w.(http.Flusher).Flush()
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
		}
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms = []RequestTransform{&rewriter{}}
		o.StreamIdleTimeout = 200 * time.Millisecond
	})
	start := time.Now()
	resp, err := rawClient().Post(px.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
	if err == nil {
		_, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a stalled error body held the client %v despite a 200 ms idle timeout", d)
	}
}

// TestUnreadableBodyGetsError: a request whose body cannot be read is
// answered with an error, not an empty 200.
func TestUnreadableBodyGetsError(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { t.Error("upstream reached") }))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, nil)
	c, err := net.Dial("tcp", strings.TrimPrefix(px.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("status = %d, want 400", resp.StatusCode)
	}
}

// TestObservedHeadersUnchanged: the headers the observers get (the
// request as sent, the upstream's answer) are not changed afterwards, even
// when the client gets another Content-Length (a finisher that writes
// more, a held body replaced): observers keep them without a copy.
func TestObservedHeadersUnchanged(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	for _, tc := range []struct{ name, ctype, body string }{
		{"stream", "text/event-stream", stream},
		{"held body", "application/json", `{"choices":[{"message":{"content":"a"},"finish_reason":"stop"}]}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				w.Header().Set("Content-Length", strconv.Itoa(len(tc.body)))
				io.WriteString(w, tc.body)
			}))
			defer up.Close()
			obs := &recordingObserver{}
			_, px := newTestProxy(t, up.URL, func(o *Options) {
				o.Finishers, o.Observers = []Finisher{grownFinisher{}}, []Observer{obs}
			})
			resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
			if len(got) <= len(tc.body) || resp.Header.Get("Content-Length") == strconv.Itoa(len(tc.body)) {
				t.Fatalf("client got %d bytes (Content-Length %q): the finisher's answer should be longer than the upstream's %d", len(got), resp.Header.Get("Content-Length"), len(tc.body))
			}
			obs.waitEnd(t)
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if cl := obs.infos[0].Header.Get("Content-Length"); cl != strconv.Itoa(len(tc.body)) {
				t.Fatalf("observed response header changed: Content-Length %q, upstream sent %d", cl, len(tc.body))
			}
		})
	}
}

// grownFinisher answers with more than the upstream sent: an extra event
// before a held stream's last events, or a longer body.
type grownFinisher struct{}

func (grownFinisher) Start(*Call, *ResponseInfo) FinishSession { return grownSession{} }

type grownSession struct{ extraSession }

func (grownSession) EndBody(_ context.Context, body []byte, _ KeepAlive) ([]byte, error) {
	return append(bytes.Clone(body), ' ', ' '), nil
}

// TestFinisherOutlivesIdleTimeout: a finisher whose own work (a review's
// side calls) takes longer than the stream idle timeout, after the
// upstream's body has ended, keeps its context: the idle timer watches
// the upstream, not what follows it.
func TestFinisherOutlivesIdleTimeout(t *testing.T) {
	stream := "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, stream)
	}))
	defer up.Close()
	fin := &slowFinisher{wait: 400 * time.Millisecond, err: make(chan error, 1)}
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Finishers, o.StreamIdleTimeout = []Finisher{fin}, 150*time.Millisecond
	})
	_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), nil)
	select {
	case err := <-fin.err:
		if err != nil {
			t.Fatalf("the finisher's context was cancelled while it worked: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the finisher never reported")
	}
	if !bytes.HasSuffix(got, []byte("data: [DONE]\n\n")) {
		t.Fatalf("client got %q", got)
	}
}

// slowFinisher holds the finish chunk, works for wait, and reports
// whether its context was still alive.
type slowFinisher struct {
	wait time.Duration
	err  chan error
}

func (f *slowFinisher) Start(*Call, *ResponseInfo) FinishSession { return f }

func (f *slowFinisher) Hold(ev *sse.Event) bool {
	return bytes.Contains(ev.Data, []byte(`"finish_reason":"stop"`))
}

func (f *slowFinisher) End(ctx context.Context, held [][]byte, out *EventWriter) error {
	select {
	case <-time.After(f.wait):
		f.err <- nil
	case <-ctx.Done():
		f.err <- context.Cause(ctx)
	}
	for _, h := range held {
		if err := out.Write(h); err != nil {
			return err
		}
	}
	return nil
}

func (f *slowFinisher) EndBody(_ context.Context, body []byte, _ KeepAlive) ([]byte, error) {
	return body, nil
}
