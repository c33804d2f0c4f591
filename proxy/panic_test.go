package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
)

// panicFinisher panics where it is told: in Start, or in its session's
// Hold; it counts the calls its sessions get.
type panicFinisher struct {
	inStart, inEnd bool // inEnd: holds the finish event and panics in End
	holds, ends    atomic.Int32
}

func (f *panicFinisher) Start(*Call, *ResponseInfo) FinishSession {
	if f.inStart {
		panic("finisher start")
	}
	return &panicSession{f: f}
}

type panicSession struct{ f *panicFinisher }

func (s *panicSession) Hold(ev *sse.Event) bool {
	s.f.holds.Add(1)
	if s.f.inEnd {
		return strings.Contains(string(ev.Data), "finish")
	}
	panic("finisher hold")
}

func (s *panicSession) End(context.Context, [][]byte, *EventWriter) error {
	s.f.ends.Add(1)
	if s.f.inEnd {
		panic("finisher end")
	}
	return nil
}

func (s *panicSession) EndBody(_ context.Context, body []byte, _ KeepAlive) ([]byte, error) {
	return body, nil
}

// panicRetrier changes the request and panics when asked about an error.
type panicRetrier struct {
	rewriter
	asked atomic.Int32
}

func (r *panicRetrier) RetryWithout(*Call, int, []byte) bool {
	r.asked.Add(1)
	panic("retrier")
}

// TestHookPanicsLeaveTheAnswer: a finisher that panics in Start, on an
// event or in End, or a Retrier that panics on an error, is left out of
// the call:
// the client gets the upstream's answer whole, the observers see the call
// end, and the proxy goes on serving. A session that panicked is not
// asked again; in a chain, the other finisher goes on and ends the
// stream. Without the recovery the panic reached net/http, which cut the
// connection mid-answer.
func TestHookPanicsLeaveTheAnswer(t *testing.T) {
	const events = "data: {\"a\":1}\n\ndata: {\"finish\":\"stop\"}\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("X-Test"), "error") {
			w.WriteHeader(400)
			w.Write([]byte(`{"error":"reasoning"}`))
			return
		}
		if b, _ := io.ReadAll(r.Body); strings.Contains(string(b), "child") { // the good finisher's own request
			w.Write([]byte(`{"child":1}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, []byte(events))
	}))
	defer up.Close()
	inStart, inHold, retrier := &panicFinisher{inStart: true}, &panicFinisher{}, &panicRetrier{}
	chained, good := &panicFinisher{}, &testFinisher{replace: true}
	endPanic, good2 := &panicFinisher{inEnd: true}, &testFinisher{replace: true}
	revised := "data: {\"a\":1}\n\ndata: {\"revised\":{\"child\":1}}\n\ndata: [DONE]\n\n"
	cases := []struct {
		name   string
		mod    func(*Options)
		header string
		status int
		want   string
		check  func(t *testing.T)
	}{
		{"finisher start", func(o *Options) { o.Finishers = []Finisher{inStart} }, "", 200, events, nil},
		{"finisher hold", func(o *Options) { o.Finishers = []Finisher{inHold} }, "", 200, events, func(t *testing.T) {
			if h, e := inHold.holds.Load(), inHold.ends.Load(); h != 2 || e != 0 { // once per call
				t.Fatalf("the panicking session was asked %d times and ended %d times; want 2 and 0", h, e)
			}
		}},
		{"retrier", func(o *Options) { o.Transforms = []RequestTransform{retrier} }, "error", 400, `{"error":"reasoning"}`, func(t *testing.T) {
			if n := retrier.asked.Load(); n != 2 {
				t.Fatalf("the retrier was asked %d times, want 2", n)
			}
		}},
		{"chain, end", func(o *Options) { o.Finishers = []Finisher{endPanic, good2} }, "", 200, revised, func(t *testing.T) {
			if e := endPanic.ends.Load(); e != 2 { // it panicked in End: the next session ended the stream
				t.Fatalf("the panicking session ended %d times, want 2", e)
			}
		}},
		{"chain", func(o *Options) { o.Finishers = []Finisher{chained, good} }, "", 200, revised, func(t *testing.T) {
			if h, e := chained.holds.Load(), chained.ends.Load(); h != 2 || e != 0 {
				t.Fatalf("the panicking session was asked %d times and ended %d times; want 2 and 0", h, e)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := &recordingObserver{}
			_, px := newTestProxy(t, up.URL, func(o *Options) {
				tc.mod(o)
				o.Observers = []Observer{obs}
			})
			body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			for range 2 { // and the proxy serves the next call too
				resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", body, http.Header{"X-Test": {tc.header}})
				if resp.StatusCode != tc.status || string(got) != tc.want {
					t.Fatalf("client got %d %q, want %d %q", resp.StatusCode, got, tc.status, tc.want)
				}
			}
			ends := obs.waitEnds(t, 2)
			for _, e := range ends {
				if e.Outcome != OutcomeComplete {
					t.Fatalf("observer ends = %+v", ends)
				}
			}
			if tc.check != nil {
				tc.check(t)
			}
		})
	}
}

// TestIdleReaderAfterTimer: a body whose read ended before the idle timer
// fired keeps its end, io.EOF or another error; one whose read ended after
// the timer fired (and closed it) was cut by the timer, whatever the read
// says, io.EOF included: an upstream may end its stream cleanly in answer
// to the closed connection (TestStreamIdleTimeout over TLS did, now and
// then, and the client took the cut stream for a whole one).
func TestIdleReaderAfterTimer(t *testing.T) {
	for _, tc := range []struct {
		err       error
		afterFire bool
		want      error
	}{{io.EOF, false, io.EOF}, {io.ErrUnexpectedEOF, false, io.ErrUnexpectedEOF}, {io.EOF, true, errIdle}, {io.ErrUnexpectedEOF, true, errIdle}} {
		closed := make(chan struct{})
		end := errReader{tc.err}
		var r io.Reader = io.MultiReader(strings.NewReader("last"), end)
		if tc.afterFire {
			r = io.MultiReader(strings.NewReader("last"), blockUntil{closed, end})
		}
		d := time.Hour
		if tc.afterFire {
			d = time.Millisecond
		}
		ir := &idleReader{r: r, d: d}
		ir.t = time.AfterFunc(d, func() { ir.fired.Store(true); close(closed) })
		b, err := io.ReadAll(ir)
		if !errors.Is(err, tc.want) && !(tc.want == io.EOF && err == nil) || string(b) != "last" {
			t.Errorf("body ending in %v, after the timer %v: read %q, %v; want %v", tc.err, tc.afterFire, b, err, tc.want)
		}
		ir.t.Stop()
	}
}

// blockUntil reads nothing until c closes, then reads r.
type blockUntil struct {
	c <-chan struct{}
	r io.Reader
}

func (b blockUntil) Read(p []byte) (int, error) {
	<-b.c
	return b.r.Read(p)
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
