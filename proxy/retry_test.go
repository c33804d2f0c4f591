package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// rewriter changes "hi" to "HI" unless Call.Retry, and asks for a retry
// when the upstream's error mentions reasoning.
type rewriter struct{ asked int }

func (r *rewriter) TransformRequest(_ context.Context, c *Call, b []byte) ([]byte, error) {
	if c.Retry {
		return b, nil
	}
	return bytes.Replace(b, []byte(`"hi"`), []byte(`"HI"`), 1), nil
}

func (r *rewriter) RetryWithout(_ *Call, status int, errBody []byte) bool {
	r.asked++
	return status == 400 && bytes.Contains(errBody, []byte("reasoning"))
}

func TestRetryWithoutTransform(t *testing.T) {
	rec := &recorder{}
	var unauthorized atomic.Bool
	up := httptest.NewServer(rec.wrap(func(w http.ResponseWriter, r *http.Request) {
		if unauthorized.Load() {
			w.WriteHeader(401)
			w.Write([]byte(strings.Repeat("x", 70<<10)))
			return
		}
		body := rec.last(t).Body
		if bytes.Contains(body, []byte(`"HI"`)) {
			w.WriteHeader(400)
			w.Write([]byte(`{"error":{"message":"Missing reasoning_content field in the assistant message at message index 1"}}`))
			return
		}
		w.Write([]byte(`{"ok":true}`))
	}))
	defer up.Close()
	rw := &rewriter{}
	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms = []RequestTransform{rw}
		o.Observers = []Observer{obs}
	})
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(body), nil)
	if resp.StatusCode != 200 || string(got) != `{"ok":true}` {
		t.Fatalf("client got %d %s", resp.StatusCode, got)
	}
	if reqs := rec.all(); len(reqs) != 2 || string(reqs[1].Body) != body {
		t.Fatalf("upstream saw %d requests; want the transformed one then the client's", len(reqs))
	}
	ends := obs.waitEnds(t, 2)
	if len(ends) != 2 || ends[0].Outcome != OutcomeRetried || ends[1].Outcome != OutcomeComplete {
		t.Fatalf("observer ends = %+v", ends)
	}
	// An error that is not about the body is passed on as it is, untouched.
	unauthorized.Store(true)
	resp, got = do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(body), nil)
	if n := len(rec.all()); resp.StatusCode != 401 || len(got) != 70<<10 || n != 3 {
		t.Fatalf("non-retried error: %d, %d bytes, %d upstream requests in all", resp.StatusCode, len(got), n)
	}
}

// slowRetrier is rewriter with a decision that takes a while.
type slowRetrier struct {
	rewriter
	wait time.Duration
}

func (r *slowRetrier) RetryWithout(c *Call, status int, errBody []byte) bool {
	time.Sleep(r.wait)
	return r.rewriter.RetryWithout(c, status, errBody)
}

// TestRetryAfterSlowDecision: a Retrier that takes longer than the
// stream idle timeout to decide, on an error body longer than what it is
// shown (the rest still unread), still gets its second attempt: the idle
// timer watches the upstream, not the decision.
func TestRetryAfterSlowDecision(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte(`"HI"`)) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error":"reasoning not allowed"}`+strings.Repeat(" ", 100<<10))
			return
		}
		_, _ = io.WriteString(w, `{"choices":[]}`)
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms = []RequestTransform{&slowRetrier{wait: 300 * time.Millisecond}}
		o.StreamIdleTimeout = 100 * time.Millisecond
	})
	resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
	if resp.StatusCode != 200 || string(got) != `{"choices":[]}` {
		t.Fatalf("got %d %q, want the second attempt's 200", resp.StatusCode, got)
	}
}

// TestNoRetryAfterSlowDecision: when a slow Retrier decides not to retry
// an error body longer than what it is shown, the client still gets the
// whole error: the idle timer did not run out during the decision.
func TestNoRetryAfterSlowDecision(t *testing.T) {
	errBody := `{"error":"quota"}` + strings.Repeat(" ", 100<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		_, _ = io.WriteString(w, errBody)
	}))
	defer up.Close()
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Transforms = []RequestTransform{&slowRetrier{wait: 300 * time.Millisecond}}
		o.StreamIdleTimeout = 100 * time.Millisecond
	})
	resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
	if resp.StatusCode != 400 || string(got) != errBody {
		t.Fatalf("got %d, %d bytes; want the upstream's whole 400 (%d bytes)", resp.StatusCode, len(got), len(errBody))
	}
}
