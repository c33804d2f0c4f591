package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
)

// failingFinisher's sessions hold from the first event that mentions
// "finish" (or every event, with holdAll) and fail in End or EndBody as
// told: after writing one event (wrote), or abandoning the response
// (abandon). withhold makes them Withholders whose held events must not
// go out as they came.
type failingFinisher struct {
	holdAll, wrote, abandon, withhold bool
	bodyWait                          time.Duration
	bodyStarted                       chan struct{} // closed when EndBody begins, if set
}

func (f *failingFinisher) Start(call *Call, info *ResponseInfo) FinishSession {
	if f.withhold {
		return &withholdingSession{failingSession{f: f}}
	}
	return &failingSession{f: f}
}

type failingSession struct{ f *failingFinisher }

func (s *failingSession) Hold(ev *sse.Event) bool {
	return s.f.holdAll || bytes.Contains(ev.Data, []byte("finish"))
}

func (s *failingSession) End(ctx context.Context, held [][]byte, out *EventWriter) error {
	if s.f.wrote {
		_ = out.Write([]byte("data: {\"revision\":1}\n\n"))
	}
	if s.f.abandon {
		return fmt.Errorf("%w: the continuation failed", ErrAbandon)
	}
	return errors.New("the continuation was cut")
}

func (s *failingSession) EndBody(ctx context.Context, body []byte, keepAlive KeepAlive) ([]byte, error) {
	if s.f.bodyStarted != nil {
		close(s.f.bodyStarted)
	}
	if s.f.bodyWait > 0 {
		select {
		case <-time.After(s.f.bodyWait):
		case <-ctx.Done():
		}
	}
	if s.f.abandon {
		return nil, fmt.Errorf("%w: the continuation failed", ErrAbandon)
	}
	return body, nil
}

type withholdingSession struct{ failingSession }

func (s *withholdingSession) Releasable() bool { return false }

// TestFinisherFailureCutsTheStream: a finish session that fails after it
// began to write, or abandons the response, gets the client's stream cut
// (as a cut upstream stream is passed on) instead of a clean end that
// would pass a half revision, or the held events it must not release,
// for a whole answer; the observers see the call end as failed. A
// session that fails before writing anything leaves the held events to
// go out as they came, as before.
func TestFinisherFailureCutsTheStream(t *testing.T) {
	const events = "data: {\"a\":1}\n\ndata: {\"finish\":\"stop\"}\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, []byte(events))
	}))
	defer up.Close()
	cases := []struct {
		name     string
		f        *failingFinisher
		cut      bool
		outcome  Outcome
		wantBody string // when not cut
	}{
		{"fails after writing", &failingFinisher{wrote: true}, true, OutcomeUpstreamError, ""},
		{"abandons", &failingFinisher{abandon: true}, true, OutcomeUpstreamError, ""},
		{"fails before writing", &failingFinisher{}, false, OutcomeComplete, events},
		{"fails before writing, holding what must not go out", &failingFinisher{withhold: true}, true, OutcomeUpstreamError, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obs := &recordingObserver{}
			_, px := newTestProxy(t, up.URL, func(o *Options) {
				o.Finishers = []Finisher{tc.f}
				o.Observers = []Observer{obs}
			})
			got, err := readAll(t, px.URL, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if tc.cut {
				if err == nil {
					t.Fatalf("the client read a whole stream: %q", got)
				}
				if strings.Contains(got, "[DONE]") || strings.Contains(got, "finish") {
					t.Fatalf("the client got the held end: %q", got)
				}
			} else if err != nil || got != tc.wantBody {
				t.Fatalf("client got %q, %v; want %q", got, err, tc.wantBody)
			}
			if ends := obs.waitEnds(t, 1); ends[0].Outcome != tc.outcome {
				t.Fatalf("the observers saw %+v, want outcome %s", ends[0], tc.outcome)
			}
		})
	}
}

// TestWithheldEventsAreNotReleased: when a session that holds events the
// client must not get (a Withholder) holds more than the proxy keeps, the
// stream is cut where the session began to hold; a session that does not
// say so gets its held events released unchanged, as before.
func TestWithheldEventsAreNotReleased(t *testing.T) {
	big := strings.Repeat("x", 3000)
	var events strings.Builder
	events.WriteString("data: {\"a\":1}\n\n")
	for range 4 {
		events.WriteString("data: {\"secret_call\":\"" + big + "\"}\n\n")
	}
	events.WriteString("data: [DONE]\n\n")
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		writeEvents(w, []byte(events.String()))
	}))
	defer up.Close()
	// The upstream ends without the blank line after its last event while
	// a Withholder holds: a cut, not a clean end without the held part.
	t.Run("cut at the end", func(t *testing.T) {
		cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: {\"a\":1}\n\ndata: {\"secret_call\":1}\n\ndata: [DONE]\n"))
		}))
		defer cut.Close()
		obs := &recordingObserver{}
		_, px := newTestProxy(t, cut.URL, func(o *Options) {
			o.Finishers = []Finisher{&holdCallFinisher{withhold: true}}
			o.Observers = []Observer{obs}
		})
		got, err := readAll(t, px.URL, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
		if err == nil || strings.Contains(got, "secret_call") {
			t.Fatalf("client got %q, %v; want a cut before the held call", got, err)
		}
		if ends := obs.waitEnds(t, 1); ends[0].Outcome == OutcomeComplete {
			t.Fatalf("the observers saw %+v, want a failed call", ends[0])
		}
	})
	for _, withhold := range []bool{true, false} {
		t.Run(fmt.Sprint("withhold=", withhold), func(t *testing.T) {
			_, px := newTestProxy(t, up.URL, func(o *Options) {
				o.Finishers = []Finisher{&holdCallFinisher{withhold: withhold}}
				o.MaxEventBytes = 8 << 10
			})
			got, err := readAll(t, px.URL, `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`)
			if withhold {
				if err == nil || strings.Contains(got, "secret_call") {
					t.Fatalf("client got %d bytes (%v), the held call among them: %v", len(got), err, strings.Contains(got, "secret_call"))
				}
				if !strings.HasPrefix(got, "data: {\"a\":1}\n\n") {
					t.Fatalf("the events before the hold did not go out: %q", got)
				}
				return
			}
			if err != nil || got != events.String() {
				t.Fatalf("client got %d bytes, %v; want the upstream's %d", len(got), err, events.Len())
			}
		})
	}
}

// holdCallFinisher holds from the first "secret_call" event; its sessions
// are Withholders when withhold is set. End is never reached here.
type holdCallFinisher struct{ withhold bool }

func (f *holdCallFinisher) Start(call *Call, info *ResponseInfo) FinishSession {
	s := &holdCallSession{}
	if f.withhold {
		return &withholdingCallSession{s}
	}
	return s
}

type holdCallSession struct{ holding bool }

func (s *holdCallSession) Hold(ev *sse.Event) bool {
	s.holding = s.holding || bytes.Contains(ev.Data, []byte("secret_call"))
	return s.holding
}
func (s *holdCallSession) End(ctx context.Context, held [][]byte, out *EventWriter) error {
	return nil
}
func (s *holdCallSession) EndBody(ctx context.Context, body []byte, keepAlive KeepAlive) ([]byte, error) {
	return body, nil
}

type withholdingCallSession struct{ *holdCallSession }

func (s *withholdingCallSession) Releasable() bool { return !s.holding }

// TestAbandonedBodyAnswersAnError: a session that abandons a non-stream
// response gets the client a 502 in the OpenAI error shape, not the body
// with the call it could not answer; and a client that left while the
// session held the body is recorded as cancelled, not as served.
func TestAbandonedBodyAnswersAnError(t *testing.T) {
	const answer = `{"choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	}))
	defer up.Close()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`)

	obs := &recordingObserver{}
	_, px := newTestProxy(t, up.URL, func(o *Options) {
		o.Finishers = []Finisher{&failingFinisher{abandon: true}}
		o.Observers = []Observer{obs}
	})
	resp, got := do(t, rawClient(), "POST", px.URL+"/v1/chat/completions", body, nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(string(got), `"code":"finisher_failed"`) || strings.Contains(string(got), "choices") {
		t.Fatalf("client got %d %s, want a 502 finisher_failed error", resp.StatusCode, got)
	}
	if ends := obs.waitEnds(t, 1); ends[0].Outcome == OutcomeComplete || ends[0].Status != http.StatusBadGateway {
		t.Fatalf("the observers saw %+v, want a failed call with status 502", ends[0])
	}

	obs2 := &recordingObserver{}
	started := make(chan struct{})
	_, px2 := newTestProxy(t, up.URL, func(o *Options) {
		o.Finishers = []Finisher{&failingFinisher{bodyWait: time.Second, bodyStarted: started}}
		o.Observers = []Observer{obs2}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { <-started; cancel() }() // the client leaves while the session holds the body
	req, _ := http.NewRequestWithContext(ctx, "POST", px2.URL+"/v1/chat/completions", bytes.NewReader(body))
	if resp, err := rawClient().Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("the client that left got an answer")
	}
	if ends := obs2.waitEnds(t, 1); ends[0].Outcome != OutcomeClientCancelled {
		t.Fatalf("the observers saw %+v, want %s", ends[0], OutcomeClientCancelled)
	}
}

// readAll posts body to the proxy's chat path and reads the answer to its
// end, returning what came and the read's error.
func readAll(t *testing.T, base, body string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", base+"/v1/chat/completions", strings.NewReader(body))
	resp, err := rawClient().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	return string(got), err
}
