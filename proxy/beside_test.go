package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shaperproxy/shaperproxy/sse"
)

// besideTransform gives f to Call.Beside on every attempt.
func besideTransform(f func(*Call)) RequestTransform { return leaving((*Call).Beside, f) }

// leaving is a transform that gives f to the call with give (Call.Beside,
// Call.After) on every attempt, with what the call is as the attempt's
// transforms run.
func leaving(give func(*Call, func()), f func(*Call)) RequestTransform {
	return RequestTransformFunc(func(_ context.Context, c *Call, b []byte) ([]byte, error) {
		give(c, func() { f(c) })
		return b, nil
	})
}

// failing are two transforms that give f to the call with give
// (Call.Beside, Call.After) and fail: one with an error, one with a panic.
func failing(give func(*Call, func()), f func()) []RequestTransform {
	return []RequestTransform{
		RequestTransformFunc(func(_ context.Context, c *Call, b []byte) ([]byte, error) {
			give(c, f)
			return nil, errors.New("no")
		}),
		RequestTransformFunc(func(_ context.Context, c *Call, b []byte) ([]byte, error) {
			give(c, f)
			panic("no")
		}),
	}
}

// rejectsMarked is an upstream that answers 400 to a body retryOnce
// marked (the first attempt) and {"ok":true} to any other.
func rejectsMarked(t *testing.T) string {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if bytes.Contains(body, []byte("marked")) {
			http.Error(w, `{"error":"no"}`, http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	return up.URL
}

// TestBeside: work a transform leaves with Call.Beside runs while the
// request is upstream (it sees the upstream holding the request, which
// it could not if it ran before the send, and the upstream, which waits
// for it before it answers, sees it started, which it could not if it
// ran after the answer), the call waits for it before the answer goes on
// (done when the client has the answer, and before the observers'
// Response), once per attempt, not at all for a transform that failed
// or panicked; a panic in it is logged and the call goes on with the
// upstream's answer.
func TestBeside(t *testing.T) {
	// Three ways the work goes beside the trip: on the proxy's own
	// transport between the write and the read (a small body) or after a
	// large body's write in the goroutine that writes it, and in a
	// goroutine of its own on another transport.
	for _, way := range []struct {
		name      string
		body      []byte
		transport func() http.RoundTripper // nil: the proxy's own
	}{
		{"a small body", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil},
		{"a large body, written aside", []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2*maxInlineBody) + `"}]}`), nil},
		{"another transport", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), func() http.RoundTripper { return &http.Transport{} }},
	} {
		t.Run("beside the trip, done before the answer: "+way.name, func(t *testing.T) {
			got, started := make(chan struct{}), make(chan struct{})
			var once atomic.Bool
			var startedFirst atomic.Bool // the work had started when the upstream held the request
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				if once.CompareAndSwap(false, true) {
					close(got)
					select { // work that starts only after the answer would keep this waiting
					case <-started:
						startedFirst.Store(true)
					case <-time.After(5 * time.Second):
					}
				}
				_, _ = io.WriteString(w, `{"ok":true}`)
			}))
			defer up.Close()
			var sawUpstream, done atomic.Bool
			var doneAtResponse atomic.Bool
			obs := &besideObserver{done: &done, doneAtResponse: &doneAtResponse, responded: make(chan struct{})}
			_, srv := newTestProxy(t, up.URL, func(o *Options) {
				if way.transport != nil {
					o.Transport = way.transport()
				}
				o.Transforms = []RequestTransform{besideTransform(func(*Call) {
					close(started)
					select {
					case <-got:
						sawUpstream.Store(true)
					case <-time.After(10 * time.Second):
					}
					time.Sleep(50 * time.Millisecond) // the answer is back by now: the call must wait
					done.Store(true)
				})}
				o.Observers = []Observer{obs}
			})
			postOK(t, srv.URL+"/v1/chat/completions", way.body)
			if !sawUpstream.Load() || !startedFirst.Load() {
				t.Fatalf("the work did not run while the upstream held the request (it saw the request: %v; it had started when the upstream had it: %v)", sawUpstream.Load(), startedFirst.Load())
			}
			if !done.Load() {
				t.Fatal("the client had the answer before the work was done")
			}
			select { // a body copied as it comes is told of once its first bytes are on their way: maybe after the client has them
			case <-obs.responded:
			case <-time.After(5 * time.Second):
				t.Fatal("the observers were not told of the answer")
			}
			if !doneAtResponse.Load() {
				t.Fatal("the observers saw the answer before the work was done")
			}
		})
	}

	t.Run("no goroutine of its own on the proxy's transport", func(t *testing.T) {
		// A goroutine started per request wakes an idle thread of the
		// runtime as the request goes out. The goroutines the process
		// starts for requests with work beside them and for requests
		// without are the same in number (the client's, the servers').
		var ran atomic.Int32
		with := okRig(t, besideTransform(func(*Call) { ran.Add(1) }))
		without := okRig(t)
		const n = 40
		started := func(post func()) uint64 {
			post() // connections made before counting
			s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
			metrics.Read(s)
			before := s[0].Value.Uint64()
			for range n {
				post()
			}
			metrics.Read(s)
			return s[0].Value.Uint64() - before
		}
		w, wo := started(with), started(without)
		if ran.Load() != n+1 {
			t.Fatalf("the work ran %d times, want %d", ran.Load(), n+1)
		}
		if w > wo+n/2 {
			t.Fatalf("%d requests with work beside them started %d goroutines, %d without: about one more a request", n, w, wo)
		}
	})

	t.Run("the header's timeout counts the work", func(t *testing.T) {
		// The work ran beside the wait for the header before it ran
		// between the write and the read: the header's deadline still
		// counts from the flush, not from the end of the work.
		release := make(chan struct{})
		up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			<-release // no answer
		}))
		defer up.Close() // after the release: Close waits for the handler
		defer close(release)
		_, srv := newTestProxy(t, up.URL, func(o *Options) {
			o.ResponseHeaderTimeout = 400 * time.Millisecond
			o.Transforms = []RequestTransform{besideTransform(func(*Call) { time.Sleep(600 * time.Millisecond) })}
		})
		start := time.Now()
		resp, _ := do(t, rawClient(), "POST", srv.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
		took := time.Since(start)
		if resp.StatusCode != http.StatusGatewayTimeout && resp.StatusCode != http.StatusBadGateway {
			t.Fatalf("answer %d, want the proxy's timeout", resp.StatusCode)
		}
		if took > 900*time.Millisecond { // 600 ms of work, then the deadline already past; from the end of the work it would be 1 s
			t.Fatalf("the header's timeout came after %v: it counted from the end of the work", took)
		}
	})

	t.Run("once per attempt", func(t *testing.T) {
		var runs, retries atomic.Int32
		_, srv := newTestProxy(t, rejectsMarked(t), func(o *Options) {
			o.Transforms = []RequestTransform{retryOnce{}, besideTransform(func(c *Call) {
				runs.Add(1)
				if c.Retry {
					retries.Add(1)
				}
			})}
		})
		resp, _ := do(t, rawClient(), "POST", srv.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil)
		if resp.StatusCode != 200 {
			t.Fatalf("answer %d", resp.StatusCode)
		}
		if runs.Load() != 2 || retries.Load() != 1 {
			t.Fatalf("ran %d times (%d on the retry), want 2 (1)", runs.Load(), retries.Load())
		}
	})

	t.Run("not for a transform that failed", func(t *testing.T) {
		var failed, kept atomic.Int32
		post := okRig(t, append([]RequestTransform{besideTransform(func(*Call) { kept.Add(1) })},
			failing((*Call).Beside, func() { failed.Add(1) })...)...)
		post()
		if kept.Load() != 1 || failed.Load() != 0 {
			t.Fatalf("the work of the transform that went on ran %d times (want 1), of those that failed %d (want 0)", kept.Load(), failed.Load())
		}
	})

	t.Run("a panic", func(t *testing.T) {
		var after atomic.Int32
		post := okRig(t,
			besideTransform(func(*Call) { panic("boom") }),
			besideTransform(func(*Call) { after.Add(1) }),
		)
		post()
		post()
		if after.Load() != 2 {
			t.Fatalf("the work after the one that panicked ran %d times, want 2", after.Load())
		}
	})
}

// okRig starts an upstream that answers {"ok":true} and the proxy in
// front of it with transforms; post sends a chat request through and
// fails the test unless the upstream's answer comes back.
func okRig(t *testing.T, transforms ...RequestTransform) (post func()) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(up.Close)
	_, srv := newTestProxy(t, up.URL, func(o *Options) { o.Transforms = transforms })
	return func() {
		t.Helper()
		postOK(t, srv.URL+"/v1/chat/completions", []byte(`{"model":"m","messages":[]}`))
	}
}

// besideObserver notes, at the response, whether the Beside work was done.
type besideObserver struct {
	done, doneAtResponse *atomic.Bool
	responded            chan struct{} // closed at the first Response
}

func (o *besideObserver) Request(*Call, *Upstream) ResponseSink { return o }
func (o *besideObserver) Response(*ResponseInfo) {
	o.doneAtResponse.Store(o.done.Load())
	select {
	case <-o.responded:
	default:
		close(o.responded)
	}
}
func (o *besideObserver) Event(*sse.Event, int, time.Duration) {}
func (o *besideObserver) Body([]byte)                          {}
func (o *besideObserver) End(End)                              {}

// TestRunBeside: outside the proxy, RunBeside and RunAfter each run the
// work given so far with Beside and After, in order and once, and only
// theirs.
func TestRunBeside(t *testing.T) {
	var got []string
	c := &Call{}
	c.Beside(func() { got = append(got, "beside 1") })
	c.After(func() { got = append(got, "after 1") })
	c.Beside(func() { got = append(got, "beside 2") })
	c.After(func() { got = append(got, "after 2") })
	c.RunBeside()
	c.RunBeside()
	c.RunAfter()
	c.RunAfter()
	if want := "[beside 1 beside 2 after 1 after 2]"; fmt.Sprint(got) != want {
		t.Fatalf("ran %v, want %s", got, want)
	}
}

// TestObserversBesideTheTrip: the observers are told of a request once it
// is on its way upstream (they see the upstream holding it, which they
// could not if they were told before the send), and before its answer
// (the upstream, which waits for them before it answers, sees them told),
// on the proxy's own transport and on another when there is work beside
// the trip; the transforms' work beside it runs after them. (A large body
// with no transform's work beside its trip has its observers told once
// the answer's first bytes are out: TestLargeBodyObserversAfterFirstBytes.)
func TestObserversBesideTheTrip(t *testing.T) {
	for _, way := range []struct {
		name      string
		body      []byte
		transport func() http.RoundTripper // nil: the proxy's own
		work      bool                     // a transform gives work beside the trip too
	}{
		{"a small body", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), nil, false},
		{"a large body, written aside", []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2*maxInlineBody) + `"}]}`), nil, true},
		// (On another transport without work beside the trip, the
		// observers are told before it, as a goroutine would cost more.)
		{"another transport, with work", []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), func() http.RoundTripper { return &http.Transport{} }, true},
	} {
		t.Run(way.name, func(t *testing.T) {
			got, told := make(chan struct{}), make(chan struct{})
			var toldFirst, sawUpstream, workAfter atomic.Bool
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				close(got)
				select {
				case <-told:
					toldFirst.Store(true)
				case <-time.After(5 * time.Second):
				}
				_, _ = io.WriteString(w, `{"ok":true}`)
			}))
			defer up.Close()
			obs := observerFunc(func(*Call, *Upstream) ResponseSink {
				select {
				case <-got:
					sawUpstream.Store(true)
				case <-time.After(5 * time.Second):
				}
				close(told)
				return nil
			})
			_, srv := newTestProxy(t, up.URL, func(o *Options) {
				if way.transport != nil {
					o.Transport = way.transport()
				}
				if way.work {
					o.Transforms = []RequestTransform{besideTransform(func(*Call) {
						select {
						case <-told:
							workAfter.Store(true)
						default:
						}
					})}
				}
				o.Observers = []Observer{obs}
			})
			postOK(t, srv.URL+"/v1/chat/completions", way.body)
			if !sawUpstream.Load() || !toldFirst.Load() {
				t.Fatalf("the observers were not told while the upstream held the request (they saw it there: %v; they were told before the answer: %v)", sawUpstream.Load(), toldFirst.Load())
			}
			if way.work && !workAfter.Load() {
				t.Fatal("the transforms' work beside the trip ran before the observers were told")
			}
		})
	}
}

// TestObserverRequestPanics: an observer that panics when told of a
// request is left out of that attempt, in whichever goroutine it was
// told (a large body's is the one that writes it): the client gets the
// answer, the other observers see the call, and the proxy goes on
// serving.
func TestObserverRequestPanics(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer up.Close()
	rec := &recordingObserver{}
	_, srv := newTestProxy(t, up.URL, func(o *Options) {
		o.Observers = []Observer{observerFunc(func(*Call, *Upstream) ResponseSink { panic("observer") }), rec}
	})
	bodies := [][]byte{
		[]byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`),
		[]byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 2*maxInlineBody) + `"}]}`),
	}
	for _, b := range append(bodies, bodies...) {
		postOK(t, srv.URL+"/v1/chat/completions", b)
	}
	for _, e := range rec.waitEnds(t, 4) {
		if e.Outcome != OutcomeComplete {
			t.Fatalf("the other observer saw the call end %+v", e)
		}
	}
}

// postOK posts body to url and fails t unless the answer is the test
// upstream's 200 {"ok":true}.
func postOK(t *testing.T, url string, body []byte) {
	t.Helper()
	resp, got := do(t, rawClient(), "POST", url, body, nil)
	if resp.StatusCode != 200 || string(got) != `{"ok":true}` {
		t.Fatalf("answer %d %q", resp.StatusCode, got)
	}
}
