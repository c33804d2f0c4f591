package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
)

// testFinisher holds from the first event carrying "finish", then either
// leaves the end alone or replaces it, after asking the upstream through
// Do (as a review does).
type testFinisher struct {
	replace bool
	wait    time.Duration
	gotCtx  chan error
	started chan struct{} // closed when End begins, if set
}

func (f *testFinisher) Start(call *Call, info *ResponseInfo) FinishSession {
	return &testSession{f: f, call: call}
}

type testSession struct {
	f    *testFinisher
	call *Call
}

func (s *testSession) Hold(ev *sse.Event) bool { return bytes.Contains(ev.Data, []byte("finish")) }

func (s *testSession) End(ctx context.Context, held [][]byte, out *EventWriter) error {
	if s.f.started != nil {
		close(s.f.started)
	}
	stop := out.KeepAlive(20*time.Millisecond, "review in progress")
	defer stop()
	select {
	case <-time.After(s.f.wait):
	case <-ctx.Done():
		s.f.gotCtx <- ctx.Err()
		return ctx.Err()
	}
	if !s.f.replace {
		return nil
	}
	resp, _, err := s.call.Do(ctx, "test-child", []byte(`{"model":"m","messages":[{"role":"user","content":"child"}]}`))
	if err != nil {
		return err
	}
	child, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_ = out.Write([]byte("data: {\"revised\":" + string(child) + "}\n\n"))
	return out.Write([]byte("data: [DONE]\n\n"))
}

func (s *testSession) EndBody(ctx context.Context, body []byte, keepAlive KeepAlive) ([]byte, error) {
	if s.f.wait > 0 {
		keepAlive(s.f.wait / 4) // left running: the proxy stops it
		time.Sleep(s.f.wait)
	}
	if !s.f.replace {
		return body, nil
	}
	return []byte(`{"revised":true}`), nil
}

func finisherRig(t *testing.T, f *testFinisher) (*httptest.Server, *recordingObserver, *recorder) {
	rec := &recorder{}
	up := httptest.NewServer(rec.wrap(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(string(rec.last(t).Body), "child") {
			if r.Header.Get("Accept-Encoding") != "" {
				t.Errorf("internal request asked for %q", r.Header.Get("Accept-Encoding"))
			}
			fmt.Fprint(w, `{"child":1}`)
			return
		}
		if strings.Contains(string(rec.last(t).Body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			writeEvents(w, []byte("data: {\"a\":1}\n\ndata: {\"finish\":\"stop\"}\n\ndata: [DONE]\n\n"))
			return
		}
		fmt.Fprint(w, `{"draft":true}`)
	}))
	t.Cleanup(up.Close)
	obs := &recordingObserver{}
	p, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Finishers = []Finisher{f}
		o.Observers = []Observer{obs}
	})
	_ = p
	return px, obs, rec
}

func TestFinisherStream(t *testing.T) {
	for _, replace := range []bool{false, true} {
		f := &testFinisher{replace: replace, wait: 70 * time.Millisecond}
		px, obs, rec := finisherRig(t, f)
		_, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(chatBody), http.Header{"Accept-Encoding": {"gzip"}})
		s := string(got)
		if !strings.HasPrefix(s, "data: {\"a\":1}\n\n") || !strings.Contains(s, ": review in progress\n\n") {
			t.Fatalf("replace=%v: got %q", replace, s)
		}
		if replace {
			if strings.Contains(s, "finish") || !strings.Contains(s, `data: {"revised":{"child":1}}`) {
				t.Fatalf("replacement not written: %q", s)
			}
			ends := obs.waitEnds(t, 2)
			obs.mu.Lock()
			n := len(obs.ups)
			obs.mu.Unlock()
			if n != 2 || len(rec.all()) != 2 || ends[0].Outcome != OutcomeComplete {
				t.Fatalf("internal call not observed: %d requests, ends %+v", n, ends)
			}
		} else if !strings.HasSuffix(s, "data: {\"finish\":\"stop\"}\n\ndata: [DONE]\n\n") {
			t.Fatalf("held events not released unchanged: %q", s)
		}
	}
}

func TestFinisherCancelledWithClient(t *testing.T) {
	f := &testFinisher{wait: 10 * time.Second, gotCtx: make(chan error, 1), started: make(chan struct{})}
	px, _, _ := finisherRig(t, f)
	resp, cancel := openStream(t, rawClient(), px.URL+"/v1/chat/completions")
	select { // leave while the finisher works, not while the stream still runs
	case <-f.started:
	case <-time.After(5 * time.Second):
		t.Fatal("the finisher never started")
	}
	cancel()
	resp.Body.Close()
	select {
	case err := <-f.gotCtx:
		if err == nil {
			t.Fatal("no cancellation")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the finisher was not cancelled when the client went away")
	}
}

func TestFinisherBody(t *testing.T) {
	nonStream := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		replace bool
		wait    time.Duration
		want    string
		length  bool
	}{
		{false, 0, `{"draft":true}`, true},
		{true, 0, `{"revised":true}`, true},
		{true, 40 * time.Millisecond, `{"revised":true}`, false},
	} {
		px, _, _ := finisherRig(t, &testFinisher{replace: tc.replace, wait: tc.wait})
		resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", []byte(nonStream), nil)
		beats := len(got) - len(bytes.TrimLeft(got, "\n"))
		if tc.wait > 0 && beats == 0 {
			t.Errorf("%+v: no keep-alive before the body: %q", tc, got)
		}
		if string(bytes.TrimLeft(got, "\n")) != tc.want || (resp.ContentLength == int64(len(tc.want))) != tc.length {
			t.Errorf("%+v: got %q (Content-Length %d)", tc, got, resp.ContentLength)
		}
	}
}
