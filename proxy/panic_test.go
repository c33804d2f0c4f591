package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/sse"
)

// panicFinisher panics where it is told: in Start, or in its session's
// Hold.
type panicFinisher struct{ inStart bool }

func (f *panicFinisher) Start(*Call, *ResponseInfo) FinishSession {
	if f.inStart {
		panic("finisher start")
	}
	return panicSession{}
}

type panicSession struct{}

func (panicSession) Hold(*sse.Event) bool { panic("finisher hold") }
func (panicSession) End(context.Context, [][]byte, *EventWriter) error {
	panic("End is not reached")
}
func (panicSession) EndBody(_ context.Context, body []byte, _ KeepAlive) ([]byte, error) {
	return body, nil
}

// panicRetrier changes the request and panics when asked about an error.
type panicRetrier struct{ rewriter }

func (*panicRetrier) RetryWithout(*Call, int, []byte) bool { panic("retrier") }

// TestHookPanicsLeaveTheAnswer: a finisher that panics in Start or on an
// event, or a Retrier that panics on an error, is left out of the call:
// the client gets the upstream's answer whole, the observers see the call
// end, and the proxy goes on serving. Without the recovery the panic
// reached net/http, which cut the connection mid-answer.
func TestHookPanicsLeaveTheAnswer(t *testing.T) {
	const events = "data: {\"a\":1}\n\ndata: {\"finish\":\"stop\"}\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("X-Test"), "error") {
			w.WriteHeader(400)
			w.Write([]byte(`{"error":"reasoning"}`))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, []byte(events))
	}))
	defer up.Close()
	cases := []struct {
		name   string
		mod    func(*Options)
		header string
		status int
		want   string
	}{
		{"finisher start", func(o *Options) { o.Finishers = []Finisher{&panicFinisher{inStart: true}} }, "", 200, events},
		{"finisher hold", func(o *Options) { o.Finishers = []Finisher{&panicFinisher{}} }, "", 200, events},
		{"retrier", func(o *Options) { o.Transforms = []RequestTransform{&panicRetrier{}} }, "error", 400, `{"error":"reasoning"}`},
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
		})
	}
}
